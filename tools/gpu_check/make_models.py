"""The models of scripts/gpu_check.sh --prepare: small ONNX graphs that lower entirely to tile
kernels (the megakernel runs nothing else yet), static shapes, deterministic weights. Written
with the onnx package only (Debian's python3-onnx).
    python3 tools/gpu_check/make_models.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def elementwise(out):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["s", "x"], ["p"]), helper.make_node("Tanh", ["p"], ["t"]),
             helper.make_node("Erf", ["t"], ["e"]), helper.make_node("Exp", ["e"], ["y"])]
    b = numpy_helper.from_array(np.linspace(-1, 1, 1024, dtype=np.float32), "b")
    g = helper.make_graph(nodes, "elementwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 1024])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 1024])], [b])
    save(g, os.path.join(out, "elementwise_512x1024.onnx"))


def matmul(out, m, k, n, name):
    rng = np.random.default_rng(k * n)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"])]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w, bias])
    save(g, os.path.join(out, f"{name}.onnx"))


def reductions(out):
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
             helper.make_node("ReduceMax", ["x"], ["mx"], axes=[-1], keepdims=1),
             helper.make_node("Sub", ["x", "mx"], ["d"]), helper.make_node("Mul", ["d", "s"], ["y"])]
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
    g = helper.make_graph(nodes, "reductions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 768])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 768])], [axes])
    save(g, os.path.join(out, "reductions_256x768.onnx"))


def main(out):
    os.makedirs(out, exist_ok=True)
    elementwise(out)
    matmul(out, 7, 70, 45, "matmul_7x70x45")
    matmul(out, 128, 768, 768, "matmul_128x768x768")
    matmul(out, 1, 2048, 4096, "gemv_1x2048x4096")
    reductions(out)


if __name__ == "__main__":
    main(sys.argv[1])
