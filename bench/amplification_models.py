#!/usr/bin/env python3
"""Generates the amplification families of docs/security.md ("Resource model"): small ONNX
files that ask cuvilc for much work. Writes serialized ModelProtos with a tiny protobuf
encoder (no onnx package needed), so any family can be made at any size:

  nested_loop D   Loop bodies nested D deep; every level carries x and doubles it
                  (Concat(x, x)), so each level's fixpoint needs several widening passes
                  (passes^D without the shared widening budget)
  nested_if D     If nodes nested D deep (then-branch holds the next level)
  functions D     model-local functions F0..FD, each calling the next twice (2^D nodes if
                  inlined without the caps)
  fat_functions D as functions, the leaf also holding a Constant of 16384 floats (a 66 KB
                  file whose inlining copies 64 KB per leaf: the inlined-bytes cap)
  flat N          a chain of N Relu nodes (N up to tens of millions: the node-count scan)

usage: amplification_models.py FAMILY SIZE OUT.onnx
Measure with: /usr/bin/time -v build/cuvilc compile OUT.onnx --emit ir -o /dev/null
"""
import struct
import sys


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(num, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def field_int(num, value):
    return varint(num << 3) + varint(value & ((1 << 64) - 1))


# onnx.proto field numbers
def node(op, inputs, outputs, name="", domain="", attrs=()):
    b = b"".join(field_bytes(1, i) for i in inputs)
    b += b"".join(field_bytes(2, o) for o in outputs)
    if name:
        b += field_bytes(3, name)
    b += field_bytes(4, op)
    b += b"".join(field_bytes(5, a) for a in attrs)
    if domain:
        b += field_bytes(7, domain)
    return b


def attr_graph(name, graph):
    return field_bytes(1, name) + field_int(20, 5) + field_bytes(6, graph)  # type GRAPH


def attr_int(name, value):
    return field_bytes(1, name) + field_int(20, 2) + field_int(3, value)  # type INT


def tensor_type(elem_type, dims):
    shape = b"".join(field_bytes(1, field_int(1, d) if isinstance(d, int) else field_bytes(2, d))
                     for d in (dims or []))
    tt = field_int(1, elem_type) + (field_bytes(2, shape) if dims is not None else b"")
    return field_bytes(1, tt)  # TypeProto.tensor_type


def value_info(name, elem_type=None, dims=None):
    b = field_bytes(1, name)
    if elem_type is not None:
        b += field_bytes(2, tensor_type(elem_type, dims))
    return b


def graph(name, nodes, inputs, outputs):
    b = b"".join(field_bytes(1, n) for n in nodes)
    b += field_bytes(2, name)
    b += b"".join(field_bytes(11, i) for i in inputs)
    b += b"".join(field_bytes(12, o) for o in outputs)
    return b


def opset(domain, version):
    return (field_bytes(1, domain) if domain else b"") + field_int(2, version)


def model(graph_bytes, functions=(), extra_opsets=()):
    b = field_int(1, 8)  # ir_version
    b += field_bytes(8, opset("", 17))
    for d, v in extra_opsets:
        b += field_bytes(8, opset(d, v))
    b += field_bytes(7, graph_bytes)
    b += b"".join(field_bytes(25, f) for f in functions)
    return b


FLOAT, INT64, BOOL = 1, 7, 9


def loop_body(level, depth):
    x, nxt = "x%d" % level, "x%d_next" % level
    nodes = []
    if level < depth:
        inner = "y%d" % level
        nodes.append(node("Loop", ["trips", "", x], [inner], "loop%d" % (level + 1),
                          attrs=[attr_graph("body", loop_body(level + 1, depth))]))
    else:
        inner = x
    nodes.append(node("Concat", [inner, inner], [nxt], "concat%d" % level,
                      attrs=[attr_int("axis", 0)]))
    nodes.append(node("Identity", ["cond%d" % level], ["cond%d_out" % level]))
    return graph("body%d" % level, nodes,
                 [value_info("i%d" % level, INT64, []), value_info("cond%d" % level, BOOL, []),
                  value_info(x)],
                 [value_info("cond%d_out" % level), value_info(nxt)])


def nested_loop(depth):
    top = [node("Loop", ["trips", "", "x"], ["y"], "loop1",
                attrs=[attr_graph("body", loop_body(1, depth))])]
    g = graph("main", top, [value_info("trips", INT64, []), value_info("x", FLOAT, [1])],
              [value_info("y", FLOAT, None)])
    return model(g)


def if_level(level, depth):
    out = "out%d" % level
    if level == depth:
        nodes = [node("Relu", ["x"], [out], "leaf")]
    else:
        els = graph("else%d" % level, [node("Neg", ["x"], ["e%d" % level])], [],
                    [value_info("e%d" % level)])
        nodes = [node("If", ["c"], [out], "if%d" % level,
                      attrs=[attr_graph("then_branch", if_level(level + 1, depth)),
                             attr_graph("else_branch", els)])]
    return graph("level%d" % level, nodes, [], [value_info(out)])


def nested_if(depth):
    g = if_level(0, depth)
    # the top level needs inputs and a typed output
    g += field_bytes(11, value_info("x", FLOAT, [4])) + field_bytes(11, value_info("c", BOOL, []))
    return model(g.replace(field_bytes(12, value_info("out0")),
                           field_bytes(12, value_info("out0", FLOAT, [4]))))


def functions(depth, payload=0):
    fs = []
    for k in range(depth + 1):
        if k == depth:
            body = [node("Relu", ["X"], ["Y"])]
            if payload:
                t = field_int(1, payload) + field_int(2, FLOAT) + \
                    field_bytes(9, b"\0" * (4 * payload))  # dims, data_type, raw_data
                value = field_bytes(1, "value") + field_int(20, 4) + field_bytes(5, t)
                body.append(node("Constant", [], ["P"], attrs=[value]))
        else:
            body = [node("F%d" % (k + 1), ["X"], ["T"], domain="custom"),
                    node("F%d" % (k + 1), ["T"], ["Y"], domain="custom")]
        f = field_bytes(1, "F%d" % k) + field_bytes(4, "X") + field_bytes(5, "Y")
        f += b"".join(field_bytes(7, n) for n in body)
        f += field_bytes(9, opset("", 17)) + field_bytes(9, opset("custom", 1))
        f += field_bytes(10, "custom")
        fs.append(f)
    g = graph("main", [node("F0", ["x"], ["y"], "call", domain="custom")],
              [value_info("x", FLOAT, [4])], [value_info("y", FLOAT, [4])])
    return model(g, fs, [("custom", 1)])


def flat(n, out):
    # Streamed: the GraphProto's length is known up front, the nodes are written in chunks.
    def relu(i):
        return field_bytes(1, node("Relu", ["v%d" % i], ["v%d" % (i + 1)]))
    tail = field_bytes(2, "main") + field_bytes(11, value_info("v0", FLOAT, [4])) + \
        field_bytes(12, value_info("v%d" % n, FLOAT, [4]))
    # A node's length depends only on how many digits its two names have.
    lengths = {}
    size = len(tail)
    for i in range(n):
        key = (len(str(i)), len(str(i + 1)))
        if key not in lengths:
            lengths[key] = len(relu(i))
        size += lengths[key]
    head = field_int(1, 8) + field_bytes(8, opset("", 17)) + varint(7 << 3 | 2) + varint(size)
    out.write(head)
    chunk = []
    written = 0
    for i in range(n):
        chunk.append(relu(i))
        if len(chunk) == 65536:
            data = b"".join(chunk)
            written += len(data)
            out.write(data)
            chunk = []
    data = b"".join(chunk) + tail
    written += len(data)
    out.write(data)
    assert written == size, (written, size)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    family, size, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(path, "wb") as out:
        if family == "flat":
            flat(size, out)
            return
        gen = {"nested_loop": nested_loop, "nested_if": nested_if, "functions": functions,
               "fat_functions": lambda d: functions(d, 16384)}
        if family not in gen:
            sys.exit("unknown family " + family)
        out.write(gen[family](size))


if __name__ == "__main__":
    main()
