#!/usr/bin/env python3
"""Writes small TensorFlow Lite models made by TensorFlow's own converter (single ops and two
small networks, each as float32 and as full-integer int8, a few also as int16x8, float16 or
hybrid), with TensorFlow Lite Micro's outputs.

Each model is `OUT/<case>/model.tflite`, with `input_J.npy` (the run-time inputs, in the model's
input order and in the model's input dtype: an int8 model takes int8, the float case's inputs
quantized with the model's input scale and zero point; gather_input's indices are int32 in both),
`output_J.npy` (the reference outputs, in the model's output order and dtype; split has three)
and `meta.json`:
{"kind": "float" | "int8" | "int16x8" | "float16" | "hybrid", "reference": "tflite-micro" |
"litert-ref", "ops": [the model's builtin operators, in order of first use]}. Cases are named
`<op>_f32`, `<op>_i8`, `<op>_i16x8`, `<op>_f16` and `<op>_hybrid`, after the TensorFlow op they
test: the converter writes squeeze's and expand_dims's as RESHAPE.

The reference is TensorFlow Lite Micro's Python interpreter (`tflite-micro`, reference kernels);
for a model it refuses (float16 and hybrid models, and exp_i8: its EXP takes float only), LiteRT's
interpreter with its reference kernels
(`ai-edge-litert`, OpResolverType.BUILTIN_REF); meta.json says which. The script also runs
LiteRT's reference kernels on every case and prints how many output elements differ from TFLite
Micro's (it stores nothing of that: the int8 and int16x8 FULLY_CONNECTED, whose weights the
converter quantizes per channel, differ by 1 in rare elements that lie within 0.01 of a rounding
tie; for sum_i8, LiteRT's reference int8 SUM writes -1 in every element, where TFLite Micro and
LiteRT's optimized kernel are within a step of the float sum), and the quantization parameters of
conv2d_i8's CONV_2D and fully_connected_i8's FULLY_CONNECTED.

Weights, inputs and the 8 calibration samples of the integer models come from numpy's
default_rng with seeds fixed per case (Keras layers get their weights set from it too;
BatchNormalization gets non-trivial moving statistics, so that folding matters), and the converter
embeds no time or path (only its version, in CONVERSION_METADATA): two runs write byte-identical
files. Cases that fail to convert or to run are left out and listed at the end of stdout, which
names no path of this machine.

    .venv/bin/pip install numpy==2.4.6 tensorflow-cpu==2.21.0 ai-edge-litert==2.3.0 \\
        tflite-micro==0.dev20261023182759
    .venv/bin/python scripts/tflite_models.py [--out target/tflite]
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import warnings
import zlib

# Calibration samples of the integer models.
CALIBRATION = 8
# TFLite Micro's tensor arena (bytes): the largest model here needs well under this.
ARENA = 4 << 20


@contextlib.contextmanager
def captured_stderr():
    """Sends what C++ code writes to fd 2 (the converter's and the interpreters' logs) to a
    temporary file; yields a function that returns its last lines (for a failure's reason)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)

        def tail(n=3):
            log.flush()
            log.seek(0)
            lines = [l for l in log.read().decode(errors="replace").splitlines() if l.strip()]
            return " | ".join(lines[-n:])

        try:
            yield tail
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def seed(name, k):
    """A seed of its own for each case and purpose (Python's hash() is salted per process)."""
    return zlib.crc32(f"{name}/{k}".encode())


def cases(np, tf, keras):
    """Each case: name, fn (a tf.function with an input signature), scale (of the standard normal
    inputs), kinds (which of f32, i8, i16x8, f16, hybrid to write), litert (the kinds whose
    reference is LiteRT's, where TFLite Micro runs the model but computes something else),
    indices (the bound of the int32 inputs, for a case that has some)."""
    out = []
    BASE = ("f32", "i8")

    def add(name, fn, scale=1.0, kinds=BASE, litert=(), indices=None):
        out.append(dict(name=name, fn=fn, scale=scale, kinds=kinds, litert=litert,
                        indices=indices))

    def spec(*shapes, int32=()):
        """Float32 inputs named a, b, ...; those at the positions in int32 are int32 (indices,
        drawn uniformly from [0, the case's `indices`))."""
        names = "abcdefgh"
        return [tf.TensorSpec(s, tf.int32 if i in int32 else tf.float32, name=names[i])
                for i, s in enumerate(shapes)]

    def weights(name):
        r = np.random.default_rng(seed(name, "weights"))

        def w(*shape, std=None):
            # He-like scale, so activations stay O(1) through a network.
            if std is None:
                fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
                std = (2.0 / fan_in) ** 0.5
            return tf.constant((std * r.standard_normal(shape)).astype(np.float32))

        return w, r

    # ---- single ops ----
    w, _ = weights("conv2d")
    k, b = w(3, 3, 4, 8), w(8, std=0.5)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def conv2d(a):
        return tf.nn.relu(tf.nn.conv2d(a, k, 1, "SAME") + b)
    add("conv2d", conv2d, kinds=BASE + ("i16x8", "f16"))

    w, _ = weights("conv2d_stride2_valid")
    k2, b2 = w(3, 3, 5, 6), w(6, std=0.5)

    @tf.function(input_signature=spec([1, 9, 9, 5]))
    def conv2d_stride2_valid(a):
        return tf.nn.relu6(tf.nn.conv2d(a, k2, 2, "VALID") + b2)
    add("conv2d_stride2_valid", conv2d_stride2_valid, scale=2.0)

    # Big enough (2304 weights) for the converter's dynamic-range quantization, which leaves
    # constants under 1024 elements in float.
    w, _ = weights("conv2d_wide")
    k3, b3 = w(3, 3, 16, 16), w(16, std=0.5)

    @tf.function(input_signature=spec([1, 6, 6, 16]))
    def conv2d_wide(a):
        return tf.nn.relu(tf.nn.conv2d(a, k3, 1, "SAME") + b3)
    add("conv2d_wide", conv2d_wide, kinds=("hybrid",))

    w, _ = weights("depthwise")
    dk, db = w(3, 3, 6, 1, std=0.4), w(6, std=0.5)

    @tf.function(input_signature=spec([1, 8, 8, 6]))
    def depthwise(a):
        return tf.nn.depthwise_conv2d(a, dk, [1, 1, 1, 1], "SAME") + db
    add("depthwise", depthwise, kinds=BASE + ("i16x8",))

    w, _ = weights("depthwise_mult2")
    dk2, db2 = w(3, 3, 4, 2, std=0.4), w(8, std=0.5)

    @tf.function(input_signature=spec([1, 9, 9, 4]))
    def depthwise_mult2(a):
        return tf.nn.depthwise_conv2d(a, dk2, [1, 2, 2, 1], "SAME") + db2
    add("depthwise_mult2", depthwise_mult2)

    for bias in (True, False):
        name = "fully_connected" if bias else "fully_connected_nobias"
        keras.utils.set_random_seed(seed(name, "keras"))
        flat = keras.layers.Flatten(name=f"{name}_flatten")
        dense = keras.layers.Dense(16, use_bias=bias, name=f"{name}_dense")
        dense.build((1, 128))
        w, r = weights(name)
        dense.set_weights([w(128, 16).numpy()] + ([w(16, std=0.5).numpy()] if bias else []))

        def fc(a, flat=flat, dense=dense):
            return dense(flat(a))
        add(name, tf.function(fc, input_signature=spec([1, 4, 4, 8])),
            kinds=BASE + (("i16x8", "f16", "hybrid") if bias else ()))

    @tf.function(input_signature=spec([1, 9, 9, 4]))
    def avgpool(a):
        return tf.nn.avg_pool2d(a, 3, 2, "SAME")
    add("avgpool", avgpool)

    @tf.function(input_signature=spec([1, 9, 9, 4]))
    def maxpool(a):
        return tf.nn.max_pool2d(a, 3, 2, "SAME")
    add("maxpool", maxpool)

    w, _ = weights("binary")
    c_add, c_mul, c_sub = w(4, std=1.0), w(4, std=1.0), w(4, std=1.0)

    @tf.function(input_signature=spec([1, 6, 6, 4], [1, 6, 6, 4]))
    def add_(a, b):
        return a + b + c_add
    add("add", add_, kinds=BASE + ("i16x8",))

    @tf.function(input_signature=spec([1, 6, 6, 4], [1, 6, 6, 4]))
    def mul(a, b):
        return a * b * c_mul
    add("mul", mul)

    @tf.function(input_signature=spec([1, 6, 6, 4], [1, 6, 6, 4]))
    def sub(a, b):
        return a - b - c_sub
    add("sub", sub)

    @tf.function(input_signature=spec([1, 4, 4, 8]))
    def reshape(a):
        return tf.reshape(a, [1, 16, 8])
    add("reshape", reshape)

    @tf.function(input_signature=spec([8, 32]))
    def softmax(a):
        return tf.nn.softmax(a)
    add("softmax", softmax, scale=2.0, kinds=BASE + ("i16x8",))

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def logistic(a):
        return tf.sigmoid(a)
    add("logistic", logistic, scale=3.0)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def tanh(a):
        return tf.tanh(a)
    add("tanh", tanh, scale=2.0)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def relu(a):
        return tf.nn.relu(a)
    add("relu", relu)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def relu6(a):
        return tf.nn.relu6(a)
    # The converter gives the int8 RELU6 the output range [0, 6] whatever its input's: TFLite
    # Micro's kernel clamps the input's codes to [q(0), q(6)] in the input's quantization and
    # writes them unscaled (its Relu6Prepare reads only the input's scale and zero point).
    # TFLite Micro's int8 RELU6 clamps in the input's quantization and never rescales to the
    # output's (which the converter makes [0, 6]); it is the reference all the same: the compiler
    # computes what TFLite Micro computes (docs/import.md).
    add("relu6", relu6, scale=4.0)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def leaky_relu(a):
        return tf.nn.leaky_relu(a, alpha=0.2)
    add("leaky_relu", leaky_relu)

    @tf.function(input_signature=spec([1, 6, 6, 3], [1, 6, 6, 5]))
    def concat(a, b):
        return tf.concat([a, 2.0 * b], axis=3)
    add("concat", concat)

    @tf.function(input_signature=spec([1, 6, 6, 16]))
    def mean(a):
        return tf.reduce_mean(a, axis=[1, 2], keepdims=True)
    add("mean", mean)

    @tf.function(input_signature=spec([1, 6, 6, 4]))
    def pad(a):
        return tf.pad(a, [[0, 0], [1, 2], [2, 1], [0, 0]])
    add("pad", pad)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def hard_swish(a):
        return a * tf.nn.relu6(a + 3.0) * (1.0 / 6.0)
    add("hard_swish", hard_swish, scale=3.0)

    @tf.function(input_signature=spec([1, 8, 8, 6]))
    def strided_slice(a):
        return a[:, 1:7:2, ::2, 1:5]
    add("strided_slice", strided_slice)

    @tf.function(input_signature=spec([1, 4, 6, 8]))
    def transpose(a):
        return tf.transpose(a, [0, 3, 1, 2])
    add("transpose", transpose)

    @tf.function(input_signature=spec([1, 4, 1, 6]))
    def squeeze(a):
        return tf.squeeze(a, axis=2)
    add("squeeze", squeeze)

    @tf.function(input_signature=spec([6, 8]))
    def expand_dims(a):
        return tf.expand_dims(a, axis=1)
    add("expand_dims", expand_dims)

    @tf.function(input_signature=spec([1, 6, 6, 6]))
    def slice_(a):
        return tf.slice(a, [0, 1, 2, 1], [1, 4, 3, 4])
    add("slice", slice_)

    # Three outputs, the pieces as they are.
    @tf.function(input_signature=spec([1, 5, 5, 6]))
    def split(a):
        return tuple(tf.split(a, 3, axis=3))
    add("split", split)

    @tf.function(input_signature=spec([1, 5, 5, 8]))
    def split_v(a):
        p0, p1, p2 = tf.split(a, [2, 5, 1], axis=3)
        return tf.concat([p1, p0 * p2], axis=3)
    add("split_v", split_v)

    @tf.function(input_signature=spec([1, 6, 4], [1, 6, 4]))
    def pack(a, b):
        return tf.stack([a, b], axis=1)
    add("pack", pack)

    @tf.function(input_signature=spec([1, 3, 5, 4]))
    def unpack(a):
        p0, p1, p2 = tf.unstack(a, axis=1)
        return p0 + p1 + p2
    add("unpack", unpack)

    # A constant table with constant indices would fold to a constant: the table is the input.
    @tf.function(input_signature=spec([10, 6]))
    def gather(a):
        return tf.gather(a, [7, 2, 2, 9, 0])
    add("gather", gather)

    w, _ = weights("gather_input")
    table = w(10, 6, std=1.0)

    @tf.function(input_signature=spec([5], int32=(0,)))
    def gather_input(a):
        return tf.gather(table, a)
    add("gather_input", gather_input, indices=10)

    @tf.function(input_signature=spec([2, 4, 5], [2, 5, 3]))
    def batch_matmul(a, b):
        return tf.matmul(a, b)
    add("batch_matmul", batch_matmul)

    w, _ = weights("minmax")
    c_max, c_min = w(4, std=0.5), w(4, std=0.5)

    @tf.function(input_signature=spec([1, 6, 6, 4]))
    def maximum(a):
        return tf.maximum(a, c_max)
    add("maximum", maximum)

    @tf.function(input_signature=spec([1, 6, 6, 4]))
    def minimum(a):
        return tf.minimum(a, c_min)
    add("minimum", minimum)

    @tf.function(input_signature=spec([1, 6, 6, 4], [1, 6, 6, 4]))
    def div(a, b):
        return a / (tf.abs(b) + 1.0)
    add("div", div)

    @tf.function(input_signature=spec([1, 6, 6, 4], [1, 6, 6, 4]))
    def squared_difference(a, b):
        return tf.math.squared_difference(a, b)
    add("squared_difference", squared_difference)

    keras.utils.set_random_seed(seed("prelu", "keras"))
    prelu_layer = keras.layers.PReLU(shared_axes=[1, 2], name="prelu_prelu")
    prelu_layer.build((1, 8, 8, 4))
    _, r = weights("prelu")
    prelu_layer.set_weights([r.uniform(0.05, 0.5, (1, 1, 4)).astype(np.float32)])

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def prelu(a):
        return prelu_layer(a)
    add("prelu", prelu)

    @tf.function(input_signature=spec([1, 6, 6, 8]))
    def sum_(a):
        return tf.reduce_sum(a, axis=[1, 2], keepdims=False)
    add("sum", sum_)

    @tf.function(input_signature=spec([1, 6, 6, 8]))
    def reduce_max(a):
        return tf.reduce_max(a, axis=3, keepdims=True)
    add("reduce_max", reduce_max)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def rsqrt(a):
        return tf.math.rsqrt(tf.abs(a) + 0.5)
    add("rsqrt", rsqrt)

    @tf.function(input_signature=spec([1, 8, 8, 4]))
    def exp(a):
        return tf.exp(a)
    add("exp", exp)

    # TF2's tf.image.resize: half_pixel_centers=True, align_corners=False.
    @tf.function(input_signature=spec([1, 4, 4, 3]))
    def resize_bilinear(a):
        return tf.image.resize(a, [8, 8], method="bilinear")
    add("resize_bilinear", resize_bilinear)

    @tf.function(input_signature=spec([1, 4, 4, 3]))
    def resize_nearest(a):
        return tf.image.resize(a, [8, 8], method="nearest")
    add("resize_nearest", resize_nearest)

    keras.utils.set_random_seed(seed("transpose_conv", "keras"))
    deconv = keras.layers.Conv2DTranspose(5, 3, strides=2, padding="same", use_bias=True,
                                          name="transpose_conv_deconv")
    deconv.build((1, 4, 4, 3))
    w, _ = weights("transpose_conv")
    # Keras's kernel is (kh, kw, out, in).
    deconv.set_weights([w(3, 3, 5, 3, std=(2.0 / 27) ** 0.5).numpy(), w(5, std=0.5).numpy()])

    @tf.function(input_signature=spec([1, 4, 4, 3]))
    def transpose_conv(a):
        return deconv(a)
    add("transpose_conv", transpose_conv)

    # ---- two small networks of Keras layers ----
    def seeded(model, name):
        """Sets every weight of a built Keras model from numpy's generator: He-scaled kernels,
        small biases, BatchNormalization with gamma in [0.5, 1.5], beta and moving mean around 0
        and moving variance in [0.5, 2]."""
        r = np.random.default_rng(seed(name, "weights"))
        for v in model.weights:
            shape, path = tuple(v.shape), v.path
            if path.endswith("gamma"):
                a = r.uniform(0.5, 1.5, shape)
            elif path.endswith("beta"):
                a = 0.2 * r.standard_normal(shape)
            elif path.endswith("moving_mean"):
                a = 0.3 * r.standard_normal(shape)
            elif path.endswith("moving_variance"):
                a = r.uniform(0.5, 2.0, shape)
            elif path.endswith("bias"):
                a = 0.1 * r.standard_normal(shape)
            else:
                # Conv2D (kh, kw, cin, cout), DepthwiseConv2D (kh, kw, c, 1), Dense (in, out).
                if "depthwise" in path:
                    fan_in = shape[0] * shape[1]
                else:
                    fan_in = int(np.prod(shape[:-1]))
                a = (2.0 / fan_in) ** 0.5 * r.standard_normal(shape)
            v.assign(a.astype(np.float32))
        return model

    L = keras.layers

    def conv_bn(x, name, filters, kernel, strides=1, act="relu"):
        x = L.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False,
                     name=f"{name}_conv")(x)
        x = L.BatchNormalization(name=f"{name}_bn")(x)
        return L.ReLU(6.0 if act == "relu6" else None, name=f"{name}_{act}")(x)

    def dw_bn(x, name, strides=1, act="relu"):
        x = L.DepthwiseConv2D(3, strides=strides, padding="same", use_bias=False, name=f"{name}_dw")(x)
        x = L.BatchNormalization(name=f"{name}_bn")(x)
        return L.ReLU(6.0 if act == "relu6" else None, name=f"{name}_{act}")(x)

    keras.utils.set_random_seed(seed("dscnn", "keras"))
    x0 = keras.Input((49, 10, 1), batch_size=1, name="dscnn_in")
    x = conv_bn(x0, "dscnn_c0", 16, (10, 4), strides=2)
    for i in (1, 2):
        x = dw_bn(x, f"dscnn_dw{i}")
        x = conv_bn(x, f"dscnn_pw{i}", 16, 1)
    x = L.GlobalAveragePooling2D(name="dscnn_pool")(x)
    x = L.Dense(12, name="dscnn_fc")(x)
    x = L.Softmax(name="dscnn_softmax")(x)
    dscnn = seeded(keras.Model(x0, x, name="dscnn"), "dscnn")
    add("dscnn", tf.function(lambda a: dscnn(a, training=False), input_signature=spec([1, 49, 10, 1])),
        kinds=BASE + ("i16x8", "f16"))

    # A depthwise convolution without an activation feeding a convolution: its int8 output's
    # zero point is neither -128 nor 0, so the centred value `x - z` is stored as biased bytes
    # between the two kernels (codegen/cpu/byte_storage.rs; str_ww's layers).
    keras.utils.set_random_seed(seed("dw_linear", "keras"))
    x0 = keras.Input((12, 6, 8), batch_size=1, name="dw_linear_in")
    x = L.Conv2D(8, 1, activation="relu", name="dw_linear_pw")(x0)
    x = L.DepthwiseConv2D(3, padding="same", name="dw_linear_dw")(x)
    x = L.Conv2D(8, 3, padding="same", activation="relu", name="dw_linear_conv")(x)
    dw_linear = seeded(keras.Model(x0, x, name="dw_linear"), "dw_linear")
    add("dw_linear", tf.function(lambda a: dw_linear(a, training=False),
                                 input_signature=spec([1, 12, 6, 8])), kinds=("i8",))

    keras.utils.set_random_seed(seed("mobilenet", "keras"))
    x0 = keras.Input((32, 32, 3), batch_size=1, name="mobilenet_in")
    x = conv_bn(x0, "mobilenet_c0", 8, 3, strides=2, act="relu6")
    for i, (filters, strides) in enumerate([(16, 1), (24, 2), (24, 1), (32, 2)]):
        x = dw_bn(x, f"mobilenet_dw{i}", strides=strides, act="relu6")
        x = conv_bn(x, f"mobilenet_pw{i}", filters, 1, act="relu6")
    x = L.GlobalAveragePooling2D(name="mobilenet_pool")(x)
    x = L.Dense(10, name="mobilenet_fc")(x)
    x = L.Softmax(name="mobilenet_softmax")(x)
    mobilenet = seeded(keras.Model(x0, x, name="mobilenet"), "mobilenet")
    add("mobilenet", tf.function(lambda a: mobilenet(a, training=False),
                                 input_signature=spec([1, 32, 32, 3])))
    return out


KIND = {"f32": "float", "i8": "int8", "i16x8": "int16x8", "f16": "float16", "hybrid": "hybrid"}


def convert(tf, fn, kind, calibration):
    c = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()])
    if kind in ("i8", "i16x8"):
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = lambda: iter(calibration)
        if kind == "i8":
            c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            c.inference_input_type = c.inference_output_type = tf.int8
        else:
            c.target_spec.supported_ops = [
                tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
            c.inference_input_type = c.inference_output_type = tf.int16
    elif kind == "f16":
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.target_spec.supported_types = [tf.float16]
    elif kind == "hybrid":
        # Dynamic-range quantization: int8 weights, float activations.
        c.optimizations = [tf.lite.Optimize.DEFAULT]
    return c.convert()


def model_io(np, schema, model):
    """(ops, inputs, outputs) of a .tflite flatbuffer: op names in order of first use; inputs and
    outputs as (name, shape, numpy dtype, scale, zero point)."""
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model, 0))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    dtypes = {schema.TensorType.FLOAT32: np.float32, schema.TensorType.INT8: np.int8,
              schema.TensorType.INT16: np.int16, schema.TensorType.INT32: np.int32,
              schema.TensorType.UINT8: np.uint8}
    g = m.subgraphs[0]
    ops = []
    for op in g.operators:
        code = m.operatorCodes[op.opcodeIndex]
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        n = names[builtin]
        if n == "CUSTOM":
            n = f"CUSTOM:{code.customCode.decode()}"
        if n not in ops:
            ops.append(n)

    def tensor(i):
        t = g.tensors[i]
        q = t.quantization
        quantized = q is not None and q.scale is not None and len(q.scale) > 0
        scale = float(q.scale[0]) if quantized else None
        zp = int(q.zeroPoint[0]) if quantized else None
        return t.name.decode(), [int(d) for d in t.shape], dtypes[t.type], scale, zp

    return ops, [tensor(i) for i in g.inputs], [tensor(i) for i in g.outputs]


def run_litert_ref(lit, model, inputs):
    ip = lit.Interpreter(model_content=model, num_threads=1,
                         experimental_op_resolver_type=lit.OpResolverType.BUILTIN_REF)
    ip.allocate_tensors()
    for d, a in zip(ip.get_input_details(), inputs):
        ip.set_tensor(d["index"], a)
    ip.invoke()
    return [ip.get_tensor(d["index"]).copy() for d in ip.get_output_details()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="target/tflite", help="output directory")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with captured_stderr():
        import numpy as np
        import tensorflow as tf
        import keras
        from ai_edge_litert import interpreter as lit
        from tflite_micro.python.tflite_micro import runtime
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    tf.get_logger().setLevel("ERROR")
    tf.random.set_seed(0)

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    with captured_stderr():
        all_cases = cases(np, tf, keras)
    problems, compare, quant = [], [], []
    for c in all_cases:
        fn, base = c["fn"], c["name"]
        sig = fn.input_signature

        def draw(r, s):
            if s.dtype == tf.int32:
                return r.integers(0, c["indices"], list(s.shape)).astype(np.int32)
            return (c["scale"] * r.standard_normal(list(s.shape))).astype(np.float32)
        r = np.random.default_rng(seed(base, "inputs"))
        floats = [draw(r, s) for s in sig]
        r = np.random.default_rng(seed(base, "calibration"))
        calibration = [[draw(r, s) for s in sig] for _ in range(CALIBRATION)]
        for kind in c["kinds"]:
            name = f"{base}_{kind}"
            with captured_stderr() as log:
                try:
                    model = convert(tf, fn, kind, calibration)
                except Exception as e:  # noqa: BLE001 - any converter failure is reported
                    problems.append(f"{name}: the converter failed: {type(e).__name__}: "
                                    f"{str(e).strip().splitlines()[-1] if str(e).strip() else log()}")
                    continue
            ops, ins, outs = model_io(np, schema, model)
            if [n for n, *_ in ins] != [s.name for s in fn.input_signature]:
                problems.append(f"{name}: the model's inputs {[n for n, *_ in ins]} are not in the "
                                f"function's order")
                continue
            inputs = []
            for (_, shape, dt, scale, zp), x in zip(ins, floats):
                if dt == x.dtype:
                    # Float models' inputs and int32 indices, as drawn.
                    inputs.append(x)
                else:
                    info = np.iinfo(dt)
                    inputs.append(np.clip(np.round(x / scale) + zp, info.min, info.max).astype(dt))
            with captured_stderr() as log:
                try:
                    ip = runtime.Interpreter.from_bytes(model, arena_size=ARENA)
                    for j, a in enumerate(inputs):
                        ip.set_input(a, j)
                    ip.invoke()
                    tflm = [ip.get_output(j).copy() for j in range(len(outs))]
                    del ip
                except Exception as e:  # noqa: BLE001 - any refusal is reported
                    why = str(e).strip().splitlines()[-1] if str(e).strip() else ""
                    tflm = f"TFLite Micro refused it ({type(e).__name__}: {why}; it logged: " \
                           f"{log(2) or 'nothing'})"
                try:
                    ref = run_litert_ref(lit, model, inputs)
                except Exception as e:  # noqa: BLE001
                    why = str(e).strip().splitlines()[-1] if str(e).strip() else ""
                    ref = f"LiteRT's BUILTIN_REF failed ({type(e).__name__}: {why}; it logged: " \
                          f"{log(2) or 'nothing'})"
            if not isinstance(tflm, str) and not isinstance(ref, str):
                diff = sum(int(np.sum(a != b)) for a, b in zip(tflm, ref))
                total = sum(a.size for a in tflm)
                worst = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                            for a, b in zip(tflm, ref))
                compare.append((name, diff, total, worst))
            if isinstance(tflm, str) or kind in c["litert"]:
                if isinstance(ref, str):
                    problems.append(f"{name}: left out: {tflm}; {ref}")
                    continue
                why = tflm if isinstance(tflm, str) else "TFLite Micro's kernel computes something else"
                problems.append(f"{name}: {why}; the reference is LiteRT's BUILTIN_REF")
                reference, ys = "litert-ref", ref
            else:
                reference, ys = "tflite-micro", tflm
            d = os.path.join(args.out, name)
            os.makedirs(d)
            with open(os.path.join(d, "model.tflite"), "wb") as f:
                f.write(model)
            for j, a in enumerate(inputs):
                np.save(os.path.join(d, f"input_{j}.npy"), a)
            for j, (y, (_, shape, dt, _, _)) in enumerate(zip(ys, outs)):
                assert y.dtype == dt and list(y.shape) == shape, (name, y.dtype, y.shape, dt, shape)
                np.save(os.path.join(d, f"output_{j}.npy"), y)
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump({"kind": KIND[kind], "reference": reference, "ops": ops}, f, indent=1)
                f.write("\n")
            print(f"{name}: {reference}, ops {' '.join(ops)}, outputs "
                  f"{[list(y.shape) for y in ys]} {ys[0].dtype}")
            if name == "conv2d_i8":
                with captured_stderr():
                    quant.append(("conv2d_i8's CONV_2D", quant_report(np, lit, model, "CONV_2D")))
            if name == "fully_connected_i8":
                with captured_stderr():
                    quant.append(("fully_connected_i8's FULLY_CONNECTED",
                                  quant_report(np, lit, model, "FULLY_CONNECTED")))

    print()
    print("LiteRT BUILTIN_REF against TFLite Micro (differing output elements / all, largest "
          "difference):")
    for name, diff, total, worst in compare:
        print(f"  {name}: {diff}/{total}, {worst:.3g}")
    for what, lines in quant:
        print()
        print(f"{what}:")
        for line in lines:
            print(f"  {line}")
    print()
    print(f"{len(os.listdir(args.out))} cases written; {len(problems)} problems" +
          (":" if problems else ""))
    for p in problems:
        print(f"  {p}")
    return 0


def quant_report(np, lit, model, op_name):
    """The quantization of the first `op_name` operator's tensors, as LiteRT reads them."""
    ip = lit.Interpreter(model_content=model,
                         experimental_op_resolver_type=lit.OpResolverType.BUILTIN_REF)
    ip.allocate_tensors()
    tensors = {t["index"]: t for t in ip.get_tensor_details()}
    conv = next(o for o in ip._get_ops_details() if o["op_name"] == op_name)
    lines = []
    for role, i in [("input", conv["inputs"][0]), ("filter", conv["inputs"][1]),
                    ("bias", conv["inputs"][2]), ("output", conv["outputs"][0])]:
        t = tensors[i]
        q = t["quantization_parameters"]
        s, z = q["scales"], q["zero_points"]
        per = "per-channel" if len(s) > 1 else "per-tensor"
        lines.append(f"{role}: {np.dtype(t['dtype']).name} {[int(d) for d in t['shape']]}, {per}, "
                     f"quantized_dimension {q['quantized_dimension']}, scales "
                     f"{np.array2string(s[:4], precision=6)}{'...' if len(s) > 4 else ''}, zero points "
                     f"{sorted(set(int(v) for v in z))}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
