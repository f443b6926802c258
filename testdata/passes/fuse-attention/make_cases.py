"""Writes the small ONNX graphs behind the fuse-attention golden cases, each spelling one
attention idiom the way torch exports it (GPT-2: cache Concat + Where on a tril buffer; LLaMA:
repeat_kv + additive mask + Softmax between Casts, scale on Q and K; softmax alone), into the
directory given. The golden inputs are then
    cuvilc compile DIR/NAME.onnx --stop-after canonicalize [--dim ...] > NAME.ir
(the --dim ranges of each case are printed below). Run with any python that has onnx.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

out = sys.argv[1]
F32_MIN = float(np.finfo(np.float32).min)


def const(name, array):
    return nh.from_array(np.asarray(array), name)


def save(name, nodes, inputs, outputs, inits):
    g = h.make_graph(nodes, name, inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], producer_name="make_cases")
    m.ir_version = 8
    onnx.save(m, f"{out}/{name}.onnx")


# GPT-2 (HF GPT2Attention with layer_past): K/V concatenated with the cache, scores / sqrt(D),
# causal Where over bias[:, :, T-S:T, :T] with fill finfo.min, present outputs.
# --dim past=0:4 --dim seq=1:4 (T <= 8, the buffer's size)
def gpt2():
    H, D, N = 2, 4, 8
    vi = lambda n, dims: h.make_tensor_value_info(n, TP.FLOAT, dims)
    vo = lambda n: h.make_tensor_value_info(n, TP.FLOAT, None)
    inputs = [vi("q", ["batch", H, "seq", D]), vi("k", ["batch", H, "seq", D]), vi("v", ["batch", H, "seq", D]),
              vi("past_key", ["batch", H, "past", D]), vi("past_value", ["batch", H, "past", D])]
    outputs = [vo("y"), vo("present_key"), vo("present_value")]
    inits = [const("bias", np.tril(np.ones((N, N), dtype=bool)).reshape(1, 1, N, N)),
             const("two", np.array(2.0, np.float32)), const("fill", np.array(F32_MIN, np.float32)),
             const("axis2", np.array([2], np.int64)), const("axis3", np.array([3], np.int64)),
             const("zero", np.array([0], np.int64)), const("i2", np.array(2, np.int64)),
             const("ax0", np.array([0], np.int64))]
    nodes = [
        h.make_node("Concat", ["past_key", "k"], ["present_key"], axis=-2),
        h.make_node("Concat", ["past_value", "v"], ["present_value"], axis=-2),
        h.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
        h.make_node("MatMul", ["q", "kt"], ["qk"]),
        h.make_node("Div", ["qk", "two"], ["scores"]),
        h.make_node("Shape", ["q"], ["q_shape"]),
        h.make_node("Gather", ["q_shape", "i2"], ["S"], axis=0),
        h.make_node("Shape", ["present_key"], ["k_shape"]),
        h.make_node("Gather", ["k_shape", "i2"], ["T"], axis=0),
        h.make_node("Sub", ["T", "S"], ["T_minus_S"]),
        h.make_node("Unsqueeze", ["T_minus_S", "ax0"], ["start"]),
        h.make_node("Unsqueeze", ["T", "ax0"], ["end"]),
        h.make_node("Slice", ["bias", "start", "end", "axis2"], ["rows"]),
        h.make_node("Slice", ["rows", "zero", "end", "axis3"], ["causal_mask"]),
        h.make_node("Where", ["causal_mask", "scores", "fill"], ["masked"]),
        h.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        h.make_node("MatMul", ["probs", "present_value"], ["y"]),
    ]
    save("gpt2_cache_causal", nodes, inputs, outputs, inits)


# GPT-2 without a cache but with the padding mask: Where(tril slice, s, finfo.min) + (1 - mask) *
# finfo.min. A row both mask entirely (a padded first position) is uniform in the unfused
# graph, so is_causal (-inf) would not be exact: the masks become one float mask instead.
# --dim seq=1:8
def gpt2_padding():
    H, D, N = 2, 4, 8
    vi = lambda n, dims: h.make_tensor_value_info(n, TP.FLOAT, dims)
    inputs = [vi("q", ["batch", H, "seq", D]), vi("k", ["batch", H, "seq", D]), vi("v", ["batch", H, "seq", D]),
              vi("padding", ["batch", 1, 1, "seq"])]
    inits = [const("bias", np.tril(np.ones((N, N), dtype=bool)).reshape(1, 1, N, N)),
             const("two", np.array(2.0, np.float32)), const("fill", np.array(F32_MIN, np.float32)),
             const("axis2", np.array([2], np.int64)), const("axis3", np.array([3], np.int64)),
             const("zero", np.array([0], np.int64)), const("i2", np.array(2, np.int64)),
             const("ax0", np.array([0], np.int64))]
    nodes = [
        h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        h.make_node("MatMul", ["q", "kt"], ["qk"]),
        h.make_node("Div", ["qk", "two"], ["scores"]),
        h.make_node("Shape", ["q"], ["q_shape"]),
        h.make_node("Gather", ["q_shape", "i2"], ["S"], axis=0),
        h.make_node("Unsqueeze", ["S", "ax0"], ["end"]),
        h.make_node("Slice", ["bias", "zero", "end", "axis2"], ["rows"]),
        h.make_node("Slice", ["rows", "zero", "end", "axis3"], ["causal_mask"]),
        h.make_node("Where", ["causal_mask", "scores", "fill"], ["masked"]),
        h.make_node("Add", ["masked", "padding"], ["padded"]),
        h.make_node("Softmax", ["padded"], ["probs"], axis=-1),
        h.make_node("MatMul", ["probs", "v"], ["y"]),
    ]
    save("gpt2_padding_mask", nodes, inputs, [vi("y", None)], inits)


# LLaMA (HF LlamaAttention, GQA): repeat_kv on K and V (Unsqueeze, Expand, Reshape), scale
# split as D^-1/4 on Q and on K, an additive mask, softmax in float32 between Casts.
def llama():
    Hq, Hkv, D = 4, 2, 8
    vi = lambda n, dims: h.make_tensor_value_info(n, TP.FLOAT, dims)
    vo = lambda n: h.make_tensor_value_info(n, TP.FLOAT, None)
    inputs = [vi("q", ["batch", Hq, "seq", D]), vi("k", ["batch", Hkv, "seq", D]),
              vi("v", ["batch", Hkv, "seq", D]), vi("mask", ["batch", 1, "seq", "seq"])]
    inits = [const("ax2", np.array([2], np.int64)),
             const("expand_shape", np.array([1, 1, Hq // Hkv, 1, 1], np.int64)),
             const("merged_shape", np.array([0, Hq, -1, D], np.int64)),
             const("quarter", np.array(D ** -0.25, np.float32))]
    nodes = []
    for t in ("k", "v"):
        nodes += [h.make_node("Unsqueeze", [t, "ax2"], [f"{t}_u"]),
                  h.make_node("Expand", [f"{t}_u", "expand_shape"], [f"{t}_e"]),
                  h.make_node("Reshape", [f"{t}_e", "merged_shape"], [f"{t}_rep"])]
    nodes += [
        h.make_node("Mul", ["q", "quarter"], ["q_s"]),
        h.make_node("Mul", ["k_rep", "quarter"], ["k_s"]),
        h.make_node("Transpose", ["k_s"], ["kt"], perm=[0, 1, 3, 2]),
        h.make_node("MatMul", ["q_s", "kt"], ["scores"]),
        h.make_node("Add", ["scores", "mask"], ["masked"]),
        h.make_node("Cast", ["masked"], ["masked_f"], to=TP.FLOAT),
        h.make_node("Softmax", ["masked_f"], ["probs_f"], axis=-1),
        h.make_node("Cast", ["probs_f"], ["probs"], to=TP.FLOAT),
        h.make_node("MatMul", ["probs", "v_rep"], ["y"]),
    ]
    save("llama_gqa_mask", nodes, inputs, [vo("y")], inits)


# Softmax alone: scale and float mask (MaskedSoftmax), a Where mask (MaskedSoftmax with a bool
# mask), both masks at once (one combined float mask), masked_fill(cond, fill) spelled
# Where(cond, fill, x) (finfo.min: a float mask; -inf: the bool mask Not(cond)), and two that
# must stay: a scale that is not a constant, and a softmax over another axis.
def softmax_only():
    vi = lambda n, t, dims: h.make_tensor_value_info(n, t, dims)
    inputs = [vi("x", TP.FLOAT, [2, 3, 5]), vi("m", TP.FLOAT, [3, 5]), vi("keep", TP.BOOL, [1, 5]),
              vi("s", TP.FLOAT, [])]
    inits = [const("half", np.array(0.5, np.float32)), const("fill", np.array(-np.inf, np.float32)),
             const("fill_min", np.array(F32_MIN, np.float32))]
    nodes = [
        h.make_node("Mul", ["x", "half"], ["xs"]),
        h.make_node("Add", ["m", "xs"], ["xm"]),
        h.make_node("Softmax", ["xm"], ["y_float_mask"], axis=-1),
        h.make_node("Where", ["keep", "x", "fill"], ["xw"]),
        h.make_node("Softmax", ["xw"], ["y_bool_mask"], axis=2),
        h.make_node("Mul", ["x", "s"], ["x_dyn"]),
        h.make_node("Softmax", ["x_dyn"], ["y_dynamic_scale"], axis=-1),
        h.make_node("Where", ["keep", "xm", "fill"], ["x_two"]),
        h.make_node("Softmax", ["x_two"], ["y_two_masks"], axis=-1),
        h.make_node("Softmax", ["xm"], ["y_not_last_axis"], axis=1),
        h.make_node("Where", ["keep", "fill_min", "x"], ["x_filled"]),
        h.make_node("Softmax", ["x_filled"], ["y_masked_fill"], axis=-1),
        h.make_node("Where", ["keep", "fill", "xs"], ["xs_filled"]),
        h.make_node("Softmax", ["xs_filled"], ["y_masked_fill_inf"], axis=-1),
    ]
    outputs = [h.make_tensor_value_info(n, TP.FLOAT, None) for n in
               ("y_float_mask", "y_bool_mask", "y_dynamic_scale", "y_two_masks", "y_not_last_axis",
                "y_masked_fill", "y_masked_fill_inf")]
    save("softmax_only", nodes, inputs, outputs, inits)


# Attention that must not become cuvil::Attention: the scale applied after the mask (it would
# scale the mask too; the softmax alone still becomes MaskedSoftmax), and a query with one head
# broadcast by MatMul against 2 key heads (not Attention's grouping).
def attention_left_alone():
    vi = lambda n, dims: h.make_tensor_value_info(n, TP.FLOAT, dims)
    inputs = [vi("q", [1, 2, 3, 4]), vi("k", [1, 2, 3, 4]), vi("v", [1, 2, 3, 4]), vi("m", [1, 1, 1, 3]),
              vi("q1", [1, 1, 3, 4])]
    inits = [const("two", np.array(2.0, np.float32))]
    nodes = [
        h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        h.make_node("MatMul", ["q", "kt"], ["s"]),
        h.make_node("Add", ["s", "m"], ["sm"]),
        h.make_node("Div", ["sm", "two"], ["scaled_late"]),
        h.make_node("Softmax", ["scaled_late"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "v"], ["y_scale_after_mask"]),
        h.make_node("MatMul", ["q1", "kt"], ["s1"]),
        h.make_node("Softmax", ["s1"], ["p1"], axis=-1),
        h.make_node("MatMul", ["p1", "v"], ["y_broadcast_heads"]),
    ]
    save("attention_left_alone", nodes, inputs, [vi("y_scale_after_mask", None), vi("y_broadcast_heads", None)], inits)


# GPT-2, two layers, no --dim: without a range T <= 8 (the buffer's size) is not proven, and
# shape inference gives the masked scores min(seq, 8)-style dims (the cond's). Both layers
# still fuse, the tril slice kept as the mask: the graph fails unless T <= 8 (the cond's
# min(T, 8) columns must broadcast against T), and the second layer's shapes follow the first's.
# (no --dim)
def gpt2_two_layers():
    H, D, N = 2, 4, 8
    vi = lambda n, dims: h.make_tensor_value_info(n, TP.FLOAT, dims)
    inputs = [vi("q", ["batch", H, "seq", D]), vi("k", ["batch", H, "seq", D]), vi("v", ["batch", H, "seq", D]),
              vi("padding", ["batch", 1, 1, "seq"])]
    inits = [const("bias", np.tril(np.ones((N, N), dtype=bool)).reshape(1, 1, N, N)),
             const("two", np.array(2.0, np.float32)), const("fill", np.array(F32_MIN, np.float32)),
             const("axis2", np.array([2], np.int64)), const("axis3", np.array([3], np.int64)),
             const("zero", np.array([0], np.int64)), const("i2", np.array(2, np.int64)),
             const("ax0", np.array([0], np.int64))]
    nodes = []
    for layer, (q, k, v, y) in enumerate([("q", "k", "v", "y1"), ("y1", "y1", "y1", "y")]):
        p = f"l{layer}_"
        nodes += [
            h.make_node("Transpose", [k], [p + "kt"], perm=[0, 1, 3, 2]),
            h.make_node("MatMul", [q, p + "kt"], [p + "qk"]),
            h.make_node("Div", [p + "qk", "two"], [p + "scores"]),
            h.make_node("Shape", [q], [p + "q_shape"]),
            h.make_node("Gather", [p + "q_shape", "i2"], [p + "S"], axis=0),
            h.make_node("Unsqueeze", [p + "S", "ax0"], [p + "end"]),
            h.make_node("Slice", ["bias", "zero", p + "end", "axis2"], [p + "rows"]),
            h.make_node("Slice", [p + "rows", "zero", p + "end", "axis3"], [p + "causal_mask"]),
            h.make_node("Where", [p + "causal_mask", p + "scores", "fill"], [p + "masked"]),
            h.make_node("Add", [p + "masked", "padding"], [p + "padded"]),
            h.make_node("Softmax", [p + "padded"], [p + "probs"], axis=-1),
            h.make_node("MatMul", [p + "probs", v], [y]),
        ]
    save("gpt2_two_layers", nodes, inputs, [vi("y", None)], inits)


# LLaMA's _make_causal_mask (transformers 4.35) from the sequence length: full(finfo.min)
# masked_fill(arange < (arange + 1).view(S, 1), 0), unsqueezed and expanded to [B, 1, S, S],
# added to the scores. Proven causal element by element: is_causal = 1, no mask computed
# (y_causal). Kept as a float mask: the diagonal shifted by one (y_shifted, j <= i + 1) and the
# fill on the other side (y_anti, masked_fill of the lower triangle).
# (no --dim)
def llama_causal_mask():
    H, D = 2, 4
    vi = lambda n, dims: h.make_tensor_value_info(n, TP.FLOAT, dims)
    vo = lambda n: h.make_tensor_value_info(n, TP.FLOAT, None)
    inputs = [vi("q", ["batch", H, "seq", D]), vi("k", ["batch", H, "seq", D]), vi("v", ["batch", H, "seq", D])]
    inits = [const("i0", np.array(0, np.int64)), const("i1", np.array(1, np.int64)),
             const("i2", np.array(2, np.int64)), const("ax0", np.array([0], np.int64)),
             const("ax01", np.array([0, 1], np.int64)), const("one1", np.array([1], np.int64)),
             const("fzero", np.array(0.0, np.float32)), const("scale", np.array(0.5, np.float32))]
    nodes = [
        h.make_node("Shape", ["q"], ["q_shape"]),
        h.make_node("Gather", ["q_shape", "i2"], ["S"], axis=0),
        h.make_node("Gather", ["q_shape", "i0"], ["B"], axis=0),
        h.make_node("Unsqueeze", ["S", "ax0"], ["S1"]),
        h.make_node("Unsqueeze", ["B", "ax0"], ["B1"]),
        h.make_node("Concat", ["S1", "S1"], ["SS"], axis=0),
        h.make_node("ConstantOfShape", ["SS"], ["full"],
                    value=nh.from_array(np.array([F32_MIN], np.float32))),
        h.make_node("Range", ["i0", "S", "i1"], ["cols"]),
        h.make_node("Concat", ["S1", "one1"], ["S_by_1"], axis=0),
        h.make_node("Concat", ["B1", "one1", "S1", "S1"], ["BSS"], axis=0),
    ]
    for name, shift, lower in (("causal", "i1", False), ("shifted", "i2", False), ("anti", "i1", True)):
        nodes += [
            h.make_node("Add", ["cols", shift], [f"{name}_next"]),
            h.make_node("Reshape", [f"{name}_next", "S_by_1"], [f"{name}_rows"]),
            h.make_node("Less", ["cols", f"{name}_rows"], [f"{name}_lower"]),
            h.make_node("Where", [f"{name}_lower", "full", "fzero"] if lower else [f"{name}_lower", "fzero", "full"],
                        [f"{name}_mask2"]),
            h.make_node("Unsqueeze", [f"{name}_mask2", "ax01"], [f"{name}_mask4"]),
            h.make_node("Expand", [f"{name}_mask4", "BSS"], [f"{name}_mask"]),
            h.make_node("Transpose", ["k"], [f"{name}_kt"], perm=[0, 1, 3, 2]),
            h.make_node("MatMul", ["q", f"{name}_kt"], [f"{name}_qk"]),
            h.make_node("Mul", [f"{name}_qk", "scale"], [f"{name}_scores"]),
            h.make_node("Add", [f"{name}_scores", f"{name}_mask"], [f"{name}_masked"]),
            h.make_node("Softmax", [f"{name}_masked"], [f"{name}_probs"], axis=-1),
            h.make_node("MatMul", [f"{name}_probs", "v"], [f"y_{name}"]),
        ]
    save("llama_causal_mask", nodes, inputs, [vo("y_causal"), vo("y_shifted"), vo("y_anti")], inits)


attention_left_alone()
gpt2()
gpt2_two_layers()
llama_causal_mask()
gpt2_padding()
llama()
softmax_only()
