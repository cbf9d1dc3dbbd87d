#!/usr/bin/env python3
"""Writes small fp32 ONNX models of the ops real exports use that onnx's node tests do not cover
in float32 (onnxruntime's `com.microsoft` contrib ops, Einsum, unrolled Loop/Scan, LpPool with
any p, DFT with dft_length), with onnxruntime's outputs.

Each model is `OUT/<name>/<name>.onnx`, with `input_J.npy` (the run-time inputs, in graph order)
and `output_J.npy` (onnxruntime's outputs, graph optimisations off so the contrib nodes run as
written; numpy's where onnxruntime has no CPU kernel). `xla-aot/tests/onnx_contrib.rs` compiles each one for the host and compares.

    .venv/bin/pip install onnx==1.23.2 onnxruntime==1.32.0 sympy==1.14.0
    .venv/bin/python scripts/onnx_contrib.py [--out target/onnx-contrib]
"""

import argparse
import os
import shutil
import sys
import warnings

OPSET = 17
MS = "com.microsoft"


def cases(np, h, T, nh):
    """Each case: name, nodes, inputs {name: array}, outputs [names], initializers {name: array},
    `ref` (a numpy reference, where onnxruntime has no CPU kernel), `opset` (default domain) and
    `fused` (the contrib ops onnxruntime's own fusions must write: the case's model is then
    onnxruntime's optimised model of the nodes, the reference the unoptimised run) and
    `transformer` ((num_heads, hidden_size): the fusions are those of onnxruntime's transformer
    optimiser for BERT instead)."""
    r = np.random.default_rng(7)

    def f(*shape):
        return r.standard_normal(shape).astype(np.float32)

    out = []

    def add(name, nodes, inputs, outputs, inits=None, ref=None, opset=OPSET, fused=(), out_types=None,
            transformer=None):
        out.append(dict(name=name, nodes=nodes, inputs=inputs, outputs=outputs, inits=inits or {},
                        ref=ref, opset=opset, fused=fused, out_types=out_types or {},
                        transformer=transformer))

    # ---- com.microsoft contrib ops ----
    x = f(2, 3, 8)
    add("ms_gelu", [h.make_node("Gelu", ["x"], ["y"], domain=MS)], {"x": 2 * x}, ["y"])
    add("ms_bias_gelu", [h.make_node("BiasGelu", ["x", "b"], ["y"], domain=MS)],
        {"x": x}, ["y"], {"b": f(8)})
    add("ms_fast_gelu", [h.make_node("FastGelu", ["x", "b"], ["y"], domain=MS)],
        {"x": 2 * x}, ["y"], {"b": f(8)})
    add("ms_fast_gelu_nobias", [h.make_node("FastGelu", ["x"], ["y"], domain=MS)], {"x": 2 * x}, ["y"])
    add("ms_quick_gelu", [h.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.5)],
        {"x": 2 * x}, ["y"])
    # onnxruntime runs BiasAdd on CUDA/ROCm only: numpy gives the reference.
    add("ms_bias_add", [h.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)],
        {"x": x, "s": f(2, 3, 8)}, ["y"], {"b": f(8)},
        ref=lambda i, k: [i["x"] + k["b"] + i["s"]])
    add("ms_skip_layer_norm",
        [h.make_node("SkipLayerNormalization", ["x", "s", "g", "beta", "bias"], ["y", "", "", "sum"],
                     domain=MS, epsilon=1e-5)],
        {"x": x, "s": f(2, 3, 8)}, ["y", "sum"], {"g": f(8), "beta": f(8), "bias": f(8)})
    add("ms_skip_layer_norm_plain",
        [h.make_node("SkipLayerNormalization", ["x", "s", "g"], ["y"], domain=MS)],
        {"x": x, "s": f(2, 3, 8)}, ["y"], {"g": f(8)})
    add("ms_skip_simplified_layer_norm",
        [h.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g", "bias"], ["y", "", "", "sum"],
                     domain=MS, epsilon=1e-6)],
        {"x": x, "s": f(2, 3, 8)}, ["y", "sum"], {"g": f(8), "bias": f(8)})
    # onnxruntime registers its LayerNormalization in the default domain only; older exporters
    # wrote it under com.microsoft: numpy gives the reference.
    def layer_norm(i, k):
        v = i["x"].astype(np.float64)
        m = v.mean(-1, keepdims=True)
        d = v - m
        y = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * k["g"] + k["b"]
        return [y.astype(np.float32)]
    add("ms_layer_norm",
        [h.make_node("LayerNormalization", ["x", "g", "b"], ["y"], domain=MS, axis=-1, epsilon=1e-5)],
        {"x": x}, ["y"], {"g": f(8), "b": f(8)}, ref=layer_norm)
    add("simplified_layer_norm",
        [h.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-6)],
        {"x": x}, ["y"], {"g": f(8)})
    img = f(1, 4, 7, 7)
    w = 0.3 * f(6, 4, 3, 3)
    for act, params in [("Relu", None), ("Sigmoid", None), ("Tanh", None), ("LeakyRelu", [0.2]),
                        ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4])]:
        kw = {"activation": act, "pads": [1, 1, 1, 1], "strides": [1, 1]}
        if params:
            kw["activation_params"] = params
        add(f"ms_fused_conv_{act.lower()}",
            [h.make_node("FusedConv", ["x", "w", "b"], ["y"], domain=MS, **kw)],
            {"x": img}, ["y"], {"w": w, "b": f(6)})
    add("ms_fused_conv_sum",
        [h.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain=MS, activation="Relu",
                     strides=[2, 2])],
        {"x": img, "z": f(1, 6, 3, 3)}, ["y"], {"w": w, "b": f(6)})

    for act, extra in [("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.1}),
                       ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.45})]:
        add(f"ms_fused_gemm_{act.lower()}",
            [h.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain=MS, activation=act, transB=1,
                         alpha=0.7, beta=1.3, **extra)],
            {"a": f(3, 6)}, ["y"], {"b": f(5, 6), "c": f(5)})
    add("ms_fused_matmul_trans_b",
        [h.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transB=1, alpha=0.5)],
        {"a": f(2, 3, 4), "b": f(2, 5, 4)}, ["y"])
    add("ms_fused_matmul_trans_a",
        [h.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=1)],
        {"a": f(4, 3), "b": f(4, 5)}, ["y"])

    # ---- BERT-class attention: Attention, MultiHeadAttention, EmbedLayerNormalization ----
    def i32(a):
        return np.asarray(a, dtype=np.int32)

    def attn(name, B, S, D, N, inputs_extra=(), mask=None, sizes=None, att_bias=False, present=False,
             **attrs):
        Dout = sum(sizes) if sizes else 3 * D
        ins = ["x", "w", "b", "m" if mask is not None else "", "", "ab" if att_bias else ""]
        while ins[-1] == "":
            ins.pop()
        if sizes:
            attrs["qkv_hidden_sizes"] = list(sizes)
        outs = ["y", "present"] if present else ["y"]
        inputs = {"x": f(B, S, D)}
        if mask is not None:
            inputs["m"] = mask
        if att_bias:
            inputs["ab"] = f(B, N, S, S)
        add(name, [h.make_node("Attention", ins, outs, domain=MS, num_heads=N, **attrs)],
            inputs, outs, {"w": 0.4 * f(D, Dout), "b": 0.1 * f(Dout)})

    attn("ms_attention", 2, 5, 16, 4)
    attn("ms_attention_one_head_present", 1, 3, 8, 1, present=True)
    attn("ms_attention_mask_2d", 2, 6, 16, 2, mask=i32([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]))
    attn("ms_attention_mask_lengths", 3, 4, 12, 3, mask=i32([4, 2, 1]))
    attn("ms_attention_mask_end_start", 2, 5, 8, 2, mask=i32([4, 5, 1, 0]))
    attn("ms_attention_mask_3d", 2, 4, 8, 2, mask=i32(r.integers(0, 2, (2, 4, 4)) | np.eye(4, dtype=int)))
    attn("ms_attention_unidirectional_left_pad", 2, 4, 8, 2, mask=i32([[0, 1, 1, 1], [0, 0, 1, 1]]),
         unidirectional=1)
    attn("ms_attention_sizes_scale_filter", 2, 3, 8, 2, mask=i32([[1, 1, 0], [1, 0, 0]]),
         sizes=(8, 8, 12), scale=0.3, mask_filter_value=-50.0)
    attn("ms_attention_bias_input", 1, 4, 8, 2, att_bias=True, unidirectional=1)
    # Seeded sweeps: shapes (S = 1 included), key lengths and unidirectional drawn per seed.
    for seed in (11, 12, 13):
        g = np.random.default_rng(seed)
        B_, S_, N_, H_ = int(g.integers(1, 4)), int(g.integers(1, 8)), int(g.choice([1, 2, 4])), \
            int(g.choice([2, 4, 8]))
        lengths = i32(g.integers(1, S_ + 1, B_))
        attn(f"ms_attention_seed{seed}", B_, S_, N_ * H_, N_, mask=lengths,
             unidirectional=int(g.integers(0, 2)))
    # MultiHeadAttention: cross attention (T != S) with the projection bias and a key padding mask.
    B, S, T_, D, Dv, N = 2, 3, 5, 8, 12, 2
    add("ms_multi_head_attention",
        [h.make_node("MultiHeadAttention", ["q", "k", "v", "bias", "kpm"], ["y", "pk", "pv"], domain=MS,
                     num_heads=N)],
        {"q": f(B, S, D), "k": f(B, T_, D), "v": f(B, T_, Dv), "kpm": i32([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])},
        ["y", "pk", "pv"], {"bias": 0.1 * f(D + D + Dv)})
    add("ms_multi_head_attention_causal",
        [h.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS, num_heads=4,
                     unidirectional=1, scale=0.2)],
        {"q": f(1, 4, 16), "k": f(1, 4, 16), "v": f(1, 4, 16)}, ["y"])
    # EmbedLayerNormalization: BERT's embeddings (word + position + segment) and its mask_index.
    Vw, P, D = 11, 8, 16
    emb = {"word": f(Vw, D), "pos": f(P, D), "seg": f(2, D), "gamma": 1 + 0.1 * f(D), "beta": 0.1 * f(D)}
    add("ms_embed_layer_norm",
        [h.make_node("EmbedLayerNormalization",
                     ["ids", "segs", "word", "pos", "seg", "gamma", "beta", "mask"],
                     ["y", "mask_index", "sum"], domain=MS, epsilon=1e-5)],
        {"ids": i32(r.integers(0, Vw, (2, 5))), "segs": i32([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]]),
         "mask": i32([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])},
        ["y", "mask_index", "sum"], emb, out_types={"mask_index": T.INT32})
    add("ms_embed_layer_norm_no_segment",
        [h.make_node("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "gamma", "beta"],
                     ["y", "mask_index"], domain=MS)],
        {"ids": i32(r.integers(0, Vw, (1, 6)))}, ["y", "mask_index"],
        {k: v for k, v in emb.items() if k != "seg"}, out_types={"mask_index": T.INT32})

    # A BERT encoder layer as PyTorch exports it: the attention half (Q/K/V projections split
    # into heads, the 0/1 mask turned into (1 - m)·-10000, scaled scores, Softmax, the output
    # projection, residual and LayerNorm) and the MLP half (erf Gelu, residual, LayerNorm).
    # onnxruntime's transformer optimiser turns them into Attention (its mask reduced to key
    # lengths), SkipLayerNormalization, BiasGelu and SkipLayerNormalization.
    B, S, D, N, F, V = 2, 5, 16, 2, 32, 30
    n = h.make_node

    def project(w, b, out, perm):
        return [n("MatMul", ["x", w], [out + "_m"]), n("Add", [out + "_m", b], [out + "_a"]),
                n("Reshape", [out + "_a", "heads"], [out + "_r"]),
                n("Transpose", [out + "_r"], [out], perm=perm)]
    encoder = [
        *project("wq", "bq", "q", [0, 2, 1, 3]), *project("wk", "bk", "kt", [0, 2, 3, 1]),
        *project("wv", "bv", "v", [0, 2, 1, 3]),
        n("Unsqueeze", ["mask", "ax1"], ["m1"]), n("Unsqueeze", ["m1", "ax2"], ["m2"]),
        n("Cast", ["m2"], ["mf"], to=T.FLOAT), n("Sub", ["one", "mf"], ["inv"]),
        n("Mul", ["inv", "neg"], ["madd"]),
        n("MatMul", ["q", "kt"], ["qk"]), n("Div", ["qk", "sqrt_h"], ["qks"]),
        n("Add", ["qks", "madd"], ["qkm"]), n("Softmax", ["qkm"], ["p"], axis=3),
        n("MatMul", ["p", "v"], ["pv"]), n("Transpose", ["pv"], ["pvt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["pvt", "merged"], ["ctx"]),
        n("MatMul", ["ctx", "wo"], ["o_m"]), n("Add", ["o_m", "bo"], ["o"]),
        n("Add", ["o", "x"], ["res"]),
        n("LayerNormalization", ["res", "g2", "b2"], ["x2"], axis=-1, epsilon=1e-12),
        n("MatMul", ["x2", "w1"], ["f1"]), n("Add", ["f1", "c1"], ["f2"]),
        n("Div", ["f2", "sq2"], ["gd"]), n("Erf", ["gd"], ["ge"]), n("Add", ["ge", "one"], ["ge1"]),
        n("Mul", ["f2", "ge1"], ["gm"]), n("Mul", ["gm", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["f3"]), n("Add", ["f3", "c2"], ["f4"]),
        n("Add", ["f4", "x2"], ["res2"]),
        n("LayerNormalization", ["res2", "g3", "b3"], ["y"], axis=-1, epsilon=1e-12)]
    encoder_weights = {
        "g1": 1 + 0.1 * f(D), "b1": 0.1 * f(D), "wq": 0.3 * f(D, D), "bq": 0.1 * f(D),
        "wk": 0.3 * f(D, D), "bk": 0.1 * f(D), "wv": 0.3 * f(D, D), "bv": 0.1 * f(D),
        "wo": 0.3 * f(D, D), "bo": 0.1 * f(D), "g2": 1 + 0.1 * f(D), "b2": 0.1 * f(D),
        "w1": 0.3 * f(D, F), "c1": 0.1 * f(F), "w2": 0.3 * f(F, D), "c2": 0.1 * f(D),
        "g3": 1 + 0.1 * f(D), "b3": 0.1 * f(D),
        "heads": np.array([0, 0, N, D // N], np.int64), "merged": np.array([0, 0, D], np.int64),
        "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64),
        "one": np.array([1.0], np.float32), "neg": np.array([-10000.0], np.float32),
        "sqrt_h": np.array([np.sqrt(D // N)], np.float32),
        "sq2": np.array([np.sqrt(2.0)], np.float32), "half": np.array([0.5], np.float32)}
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=np.int64)
    add("ort_transformer_bert_layer",
        [n("Add", ["in1", "in2"], ["ln_in"]),
         n("LayerNormalization", ["ln_in", "g1", "b1"], ["x"], axis=-1, epsilon=1e-12), *encoder],
        {"in1": f(B, S, D), "in2": f(B, S, D), "mask": mask}, ["y"], encoder_weights,
        fused=("Attention", "SkipLayerNormalization", "BiasGelu"), transformer=(N, D))
    # The same layer behind BERT's embeddings (word + position + segment, LayerNorm): the
    # optimiser writes EmbedLayerNormalization, whose mask_index feeds Attention.
    add("ort_transformer_bert_embedded",
        [n("Gather", ["word", "ids"], ["we"]), n("Gather", ["pos", "pos_ids"], ["pe"]),
         n("Gather", ["seg", "segs"], ["se"]), n("Add", ["we", "pe"], ["e1"]),
         n("Add", ["e1", "se"], ["e2"]),
         n("LayerNormalization", ["e2", "g1", "b1"], ["x"], axis=-1, epsilon=1e-12), *encoder],
        {"ids": r.integers(0, V, (B, S)).astype(np.int64),
         "segs": np.array([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]], dtype=np.int64), "mask": mask}, ["y"],
        {**encoder_weights, "word": f(V, D), "pos": f(S, D), "seg": f(2, D),
         "pos_ids": np.arange(S, dtype=np.int64)[None, :]},
        fused=("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"),
        transformer=(N, D))

    # ---- Blocks that onnxruntime's own fusions rewrite (ORT_ENABLE_EXTENDED, saved) ----
    D, F = 16, 32
    n = h.make_node
    add("ort_fused_mlp_block",
        [n("MatMul", ["x", "w1"], ["m1"]), n("Add", ["m1", "b1"], ["a1"]),
         n("Div", ["a1", "sq2"], ["d"]), n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["e1"]),
         n("Mul", ["a1", "e1"], ["ge"]), n("Mul", ["ge", "half"], ["g1"]),
         n("MatMul", ["g1", "w2"], ["m2"]), n("Add", ["m2", "b2"], ["a2"]), n("Add", ["a2", "x"], ["res"]),
         n("ReduceMean", ["res"], ["mu"], axes=[-1]), n("Sub", ["res", "mu"], ["c"]),
         n("Pow", ["c", "two"], ["c2"]), n("ReduceMean", ["c2"], ["var"], axes=[-1]),
         n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Div", ["c", "sd"], ["nrm"]),
         n("Mul", ["nrm", "g"], ["ng"]), n("Add", ["ng", "be"], ["y"])],
        {"x": f(1, 4, D)}, ["y"],
        {"w1": 0.3 * f(D, F), "b1": 0.1 * f(F), "w2": 0.3 * f(F, D), "b2": 0.1 * f(D),
         "g": 1 + 0.1 * f(D), "be": 0.1 * f(D), "half": np.array(0.5, np.float32),
         "one": np.array(1.0, np.float32), "sq2": np.array(np.sqrt(2.0), np.float32),
         "two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32)},
        opset=13, fused=("Gelu", "SkipLayerNormalization"))
    add("ort_fused_conv_block",
        [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
         n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n("LeakyRelu", ["c2"], ["y"], alpha=0.2)],
        {"x": f(1, 3, 8, 8)}, ["y"],
        {"w1": 0.3 * f(8, 3, 3, 3), "b1": 0.1 * f(8), "w2": 0.3 * f(4, 8, 3, 3), "b2": 0.1 * f(4)},
        fused=("FusedConv",))

    # ---- Einsum, the equations exporters write ----
    for name, eq, shapes in [
        ("einsum_batch_matmul", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("einsum_attention", "bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 5, 8)]),
        ("einsum_attention_value", "bhij,bhjd->bhid", [(2, 3, 4, 5), (2, 3, 5, 8)]),
        ("einsum_transpose", "ij->ji", [(3, 5)]),
        ("einsum_row_sum", "ij->i", [(3, 5)]),
        ("einsum_outer", "i,j->ij", [(3,), (4,)]),
        ("einsum_implicit", "ij,jk", [(3, 4), (4, 5)]),
        ("einsum_inner", "i,i", [(6,), (6,)]),
        ("einsum_total", "ijk->", [(2, 3, 4)]),
        ("einsum_hadamard", "ij,ij->ij", [(3, 4), (3, 4)]),
        ("einsum_linear", "bsd,ed->bse", [(2, 3, 8), (5, 8)]),
        ("einsum_ellipsis", "...ij,...jk->...ik", [(2, 1, 3, 4), (2, 5, 4, 6)]),
        ("einsum_diagonal", "bii->bi", [(2, 4, 4)]),
        ("einsum_three", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
        ("einsum_permute", "abcd->dbca", [(2, 3, 4, 5)]),
    ]:
        names = [f"x{j}" for j in range(len(shapes))]
        add(name, [h.make_node("Einsum", names, ["y"], equation=eq)],
            {n: f(*s) for n, s in zip(names, shapes)}, ["y"])

    # ---- LpPool with p other than 2 ----
    add("lppool_p1", [h.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 3], p=1, strides=[2, 2])],
        {"x": f(1, 3, 7, 7)}, ["y"])
    add("lppool_p3_pads", [h.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], p=3,
                                       pads=[1, 0, 1, 1])],
        {"x": f(1, 2, 5, 6)}, ["y"])
    add("lppool_ceil_dilations_opset18",
        [h.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], p=2, strides=[2, 2], ceil_mode=1,
                     dilations=[2, 1])],
        {"x": f(1, 2, 7, 8)}, ["y"], opset=18)

    # ---- DFT (opset 17 form: `axis` attribute) with dft_length padding and truncating ----
    add("dft_complex_padded", [h.make_node("DFT", ["x", "len"], ["y"], axis=2)],
        {"x": f(2, 3, 5, 2)}, ["y"], {"len": np.array(8, dtype=np.int64)})
    add("dft_real_truncated_onesided", [h.make_node("DFT", ["x", "len"], ["y"], axis=1, onesided=1)],
        {"x": f(2, 9, 1)}, ["y"], {"len": np.array(7, dtype=np.int64)})
    add("dft_inverse_complex", [h.make_node("DFT", ["x"], ["y"], axis=1, inverse=1)],
        {"x": f(3, 6, 2)}, ["y"])

    # ---- Loop with a constant trip count: y = 0.5 y + x[i], scan output y ----
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Gather", ["xs", "i"], ["xi"], axis=0),
         h.make_node("Mul", ["y_in", "half"], ["hy"]),
         h.make_node("Add", ["hy", "xi"], ["y_out"]),
         h.make_node("Relu", ["y_out"], ["scan"])],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("y_in", T.FLOAT, [4])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("y_out", T.FLOAT, [4]),
         h.make_tensor_value_info("scan", T.FLOAT, [4])],
        [nh.from_array(np.array(0.5, dtype=np.float32), "half")])
    add("loop_const_trips",
        [h.make_node("Loop", ["trips", "cond", "y0"], ["y", "ys"], body=body)],
        {"y0": f(4), "xs": f(5, 4)}, ["y", "ys"],
        {"trips": np.array(5, dtype=np.int64), "cond": np.array(True)})

    # ---- Loop without a trip count: runs while i + 1 < 4 (the condition folds each iteration);
    # the body holds an If on the iteration number ----
    then_g = h.make_graph([h.make_node("Mul", ["y_in2", "two"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, [3])])
    else_g = h.make_graph([h.make_node("Sub", ["y_in2", "one_f"], ["e"])], "else", [],
                          [h.make_tensor_value_info("e", T.FLOAT, [3])])
    body2 = h.make_graph(
        [h.make_node("Add", ["i2", "one_i"], ["next"]),
         h.make_node("Less", ["next", "four"], ["cond_out2"]),
         h.make_node("Less", ["i2", "two_i"], ["early"]),
         h.make_node("If", ["early"], ["branch"], then_branch=then_g, else_branch=else_g),
         h.make_node("Tanh", ["branch"], ["y_out2"])],
        "body2",
        [h.make_tensor_value_info("i2", T.INT64, []), h.make_tensor_value_info("c2", T.BOOL, []),
         h.make_tensor_value_info("y_in2", T.FLOAT, [3])],
        [h.make_tensor_value_info("cond_out2", T.BOOL, []), h.make_tensor_value_info("y_out2", T.FLOAT, [3])],
        [nh.from_array(np.array(1, dtype=np.int64), "one_i"),
         nh.from_array(np.array(2, dtype=np.int64), "two_i"),
         nh.from_array(np.array(4, dtype=np.int64), "four"),
         nh.from_array(np.array(2.0, dtype=np.float32), "two"),
         nh.from_array(np.array(1.0, dtype=np.float32), "one_f")])
    add("loop_while_cond_with_if",
        [h.make_node("Loop", ["", "go", "y0"], ["y"], body=body2)],
        {"y0": f(3)}, ["y"], {"go": np.array(True)})

    # ---- Scan, reversed over axis 1, output stacked on axis 1 ----
    sbody = h.make_graph(
        [h.make_node("Add", ["acc_in", "xt"], ["acc_out"]),
         h.make_node("Tanh", ["acc_out"], ["yt"])],
        "sbody",
        [h.make_tensor_value_info("acc_in", T.FLOAT, [2]), h.make_tensor_value_info("xt", T.FLOAT, [2])],
        [h.make_tensor_value_info("acc_out", T.FLOAT, [2]), h.make_tensor_value_info("yt", T.FLOAT, [2])])
    add("scan_reverse_axis1",
        [h.make_node("Scan", ["acc0", "x"], ["acc", "ys"], body=sbody, num_scan_inputs=1,
                     scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1])],
        {"acc0": f(2), "x": f(2, 6)}, ["acc", "ys"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="target/onnx-contrib", help="output directory")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    for c in cases(np, h, T, nh):
        name, nodes, inputs, outputs, inits = c["name"], c["nodes"], c["inputs"], c["outputs"], c["inits"]
        ref, opset = c["ref"], c["opset"]
        vi = lambda n, a: h.make_tensor_value_info(n, h.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        g = h.make_graph(nodes, name, [vi(n, a) for n, a in inputs.items()],
                         [h.make_tensor_value_info(o, c["out_types"].get(o, T.FLOAT), None) for o in outputs],
                         [nh.from_array(a, n) for n, a in inits.items()])
        opsets = [h.make_opsetid("", opset)]
        if any(n.domain == MS for n in nodes):
            opsets.append(h.make_opsetid(MS, 1))
        model = h.make_model(g, opset_imports=opsets, producer_name="onnx_contrib.py")
        model.ir_version = 8
        d = os.path.join(args.out, name)
        os.makedirs(d)
        path = os.path.join(d, f"{name}.onnx")
        onnx.save(model, path)
        if c["transformer"]:
            # onnxruntime's transformer optimiser writes the model a user would save.
            from onnxruntime.transformers.optimizer import optimize_model
            heads, hidden = c["transformer"]
            optimize_model(model, model_type="bert", num_heads=heads, hidden_size=hidden,
                           opt_level=0).save_model_to_file(path)
            ops = {n.op_type for n in onnx.load(path).graph.node if n.domain == MS}
            missing = set(c["fused"]) - ops
            if missing:
                raise SystemExit(f"{name}: the optimiser wrote no {sorted(missing)} (it wrote {sorted(ops)})")
        elif c["fused"]:
            # onnxruntime's fusions write the model a user would save.
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            opts.optimized_model_filepath = path
            ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            ops = {n.op_type for n in onnx.load(path).graph.node if n.domain == MS}
            missing = set(c["fused"]) - ops
            if missing:
                raise SystemExit(f"{name}: onnxruntime wrote no {sorted(missing)} (it wrote {sorted(ops)})")
        if ref is not None:
            outs = ref(inputs, inits)
        else:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(model.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"])
            outs = sess.run(None, inputs)
        for j, a in enumerate(inputs.values()):
            np.save(os.path.join(d, f"input_{j}.npy"), a)
        for j, y in enumerate(outs):
            np.save(os.path.join(d, f"output_{j}.npy"), np.asarray(y, dtype=np.float32))
        print(f"{name}: outputs {[list(np.shape(o)) for o in outs]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
