"""Writes the onnx wheel's backend node cases (model.onnx + test_data_set_*/{input,output}_N.pb)
into OUT/node/. The wheel ships no node data; its case generators (onnx.backend.test.case.node,
the `expect` calls) make them, and cmd_tools' generate-data writes them to disk. generate-data
only walks the model cases, so it is run here with the node cases in their place: the files are
written exactly as the wheel's own tool writes them. Run in the venv of make_cases.sh."""
import sys
import types

import onnx
import onnx.backend.test.case.node as node_test
import onnx.backend.test.cmd_tools as cmd_tools

out = sys.argv[1]
cmd_tools.model_test = types.SimpleNamespace(collect_testcases=lambda: node_test.collect_testcases(None))
cmd_tools.generate_data(types.SimpleNamespace(output=out))
print(f"onnx {onnx.__version__}: node cases written to {out}/node")
