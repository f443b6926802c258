"""ONNX Runtime quantize_static QDQ models and their ONNX Runtime outputs (suite QdqImport).

Builds three small float models with onnx.helper (random weights, fixed seeds), a conv net
(Conv+Relu x2, a 1x1 Conv, GlobalAveragePool, Flatten, Gemm), a transformer-style MLP block
(MatMul+Add, Relu, MatMul+Add, residual Add over [1, 8, 32]) and a single-head attention
(q/k/v projections, q @ k^T, scale, Softmax, @ v: products of two activations), quantizes each with ONNX
Runtime's quantize_static (QDQ format, per_channel=True, QUInt8 activations, QInt8 weights,
MinMax calibration on 16 random samples), and writes under testdata/models/:

  qdq_<name>.onnx             the quantized model
  qdq_<name>_input.npy        a fixed input (not one of the calibration samples)
  qdq_<name>_output.npy       ONNX Runtime's output for it (default session options)
  qdq_<name>_step.npy         the scale of the output's last QuantizeLinear: one step

Run from the repository root with the venv that has onnxruntime (1.32):
  /work/main/.venv/bin/python testdata/scripts/make_qdq_models.py
"""
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                      QuantType, quantize_static)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")


def init(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def conv_net(rng):
    w = lambda *s: rng.normal(0, 0.3, s)
    inits = [
        init("w1", w(8, 3, 3, 3)), init("b1", w(8)),
        init("w2", w(8, 8, 3, 3)), init("b2", w(8)),
        init("w3", w(16, 8, 1, 1)), init("b3", w(16)),
        init("wf", w(10, 16)), init("bf", w(10)),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3"),
        helper.make_node("GlobalAveragePool", ["c3"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "qdq_conv_net",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    return graph, (1, 3, 16, 16)


def mlp_block(rng):
    w = lambda *s: rng.normal(0, 0.25, s)
    inits = [init("w1", w(32, 64)), init("b1", w(64)), init("w2", w(64, 32)), init("b2", w(32))]
    nodes = [
        helper.make_node("MatMul", ["input", "w1"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_bias"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "b2"], ["a2"], name="fc2_bias"),
        helper.make_node("Add", ["a2", "input"], ["output"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes, "qdq_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 32])], inits)
    return graph, (1, 8, 32)


def attention(rng):
    w = lambda *s: rng.normal(0, 0.25, s)
    inits = [init("wq", w(16, 16)), init("wk", w(16, 16)), init("wv", w(16, 16)),
             init("scale", np.float32(0.25))]
    nodes = [
        helper.make_node("MatMul", ["input", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["input", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["input", "wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_transpose", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale"),
        helper.make_node("Softmax", ["ss"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["output"], name="context"),
    ]
    graph = helper.make_graph(
        nodes, "qdq_attention",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 16])], inits)
    return graph, (1, 8, 16)


class Reader(CalibrationDataReader):
    def __init__(self, shape, seed):
        rng = np.random.default_rng(seed)
        self.samples = [{"input": rng.normal(0, 1, shape).astype(np.float32)} for _ in range(16)]

    def get_next(self):
        return self.samples.pop(0) if self.samples else None


def last_output_step(model, output):
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == output:
            return np.float32(inits[n.input[1]]).reshape(())
    raise SystemExit(f"{output} is not the output of a DequantizeLinear")


def main():
    for name, make, seed in (("conv_net", conv_net, 1), ("mlp", mlp_block, 2), ("attention", attention, 3)):
        graph, shape = make(np.random.default_rng(seed))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        with tempfile.TemporaryDirectory() as tmp:
            fp = os.path.join(tmp, "float.onnx")
            onnx.save(model, fp)
            qpath = os.path.join(OUT, f"qdq_{name}.onnx")
            quantize_static(fp, qpath, Reader(shape, seed + 100), quant_format=QuantFormat.QDQ,
                            per_channel=True, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
        q = onnx.load(qpath)
        out_name = q.graph.output[0].name
        x = np.random.default_rng(seed + 1000).normal(0, 1, shape).astype(np.float32)
        sess = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
        y = sess.run(None, {"input": x})[0]
        np.save(os.path.join(OUT, f"qdq_{name}_input.npy"), x)
        np.save(os.path.join(OUT, f"qdq_{name}_output.npy"), y)
        np.save(os.path.join(OUT, f"qdq_{name}_step.npy"), last_output_step(q, out_name))
        ops = sorted({n.op_type for n in q.graph.node})
        print(f"qdq_{name}.onnx: {os.path.getsize(qpath)} bytes, ops {ops}, output {out_name} {y.shape}")


if __name__ == "__main__":
    main()
