"""Exports use only ops that TF Serving's runtime registers, which is older than the TensorFlow they are made with.

TF Serving 2.20.0 links TensorFlow 2.20 and tensorflow-text 2.20 (export/serving_runtime.py keeps
the list of the ops they register). The exporter refuses a SavedModel with an op outside that list,
wherever in its graphs the op is; the session's float and int8 exports pass.
"""

import numpy as np
import pytest
import tensorflow as tf

from export import serving_runtime
from export.exporters import ExportError, require_serving_ops
from export.serving_runtime import PYTHON_ONLY_OPS, serving_ops, unregistered_ops


class Holder(tf.Module):
    """A SavedModel with one op inside a loop body (a function of the graph's library, not the graph)."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, images):
        def body(i, sizes):
            return i + 1, sizes + tf.size(self.op(images[i]))

        _, sizes = tf.while_loop(lambda i, _: i < tf.size(images), body, [0, 0])
        return {"sizes": sizes}


def save_holder(op, directory):
    module = Holder(op)
    tf.saved_model.save(module, str(directory), signatures={"serving_default": module.serve})
    return str(directory)


@pytest.fixture(scope="module")
def jxl_export(tmp_path_factory):
    """A SavedModel that decodes JPEG XL: DecodeJxl is new in TensorFlow 2.21, so 2.20 cannot load it."""
    return save_holder(tf.io.decode_jxl, tmp_path_factory.mktemp("jxl") / "1")


# ------------------------------------------------------------------------------------ the op check
def test_the_op_check_refuses_an_op_the_runtime_lacks_wherever_it_is(jxl_export, tmp_path):
    assert "DecodeJxl" not in serving_ops() and len(serving_ops()) > 1500
    with pytest.raises(ExportError, match=r"uses 1 op that TF Serving 2\.20\.0 \(TensorFlow 2\.20 with "
                                          r"tensorflow-text 2\.20\) does not register.*DecodeJxl \(in while_body"):
        require_serving_ops(jxl_export)
    # Another op, allowed by the list, refused once it is taken out of it: the whole library is read.
    png = save_holder(tf.io.decode_png, tmp_path / "png")
    require_serving_ops(png)
    missing = unregistered_ops(png, serving_ops() - {"DecodePng"})
    assert list(missing) == ["DecodePng"] and all(place.startswith("while_body") for place in missing["DecodePng"])
    two = r"uses 2 ops .*DecodePng \(in while_body.*; StatelessWhile \(in __inference_serve"
    with pytest.raises(ExportError, match=two):
        require_serving_ops(png, serving_ops() - {"DecodePng", "StatelessWhile"})


def test_the_op_check_refuses_python_callbacks(tmp_path):
    """tf.numpy_function runs in the Python that built the graph; TF Serving has none."""
    assert PYTHON_ONLY_OPS.isdisjoint(serving_ops())
    python_export = save_holder(lambda image: tf.numpy_function(np.char.upper, [image], tf.string), tmp_path / "py")
    assert set(unregistered_ops(python_export)) == {"PyFunc"}
    with pytest.raises(ExportError, match="PyFunc"):
        require_serving_ops(python_export)


@pytest.fixture(scope="module")
def exports(exported_number_model, int8_exports):
    """The session's SavedModel exports: float, int8 (dequantized once), int8 x int8 products."""
    _, int8 = int8_exports
    return {"float": exported_number_model, "int8": int8["saved_model"],
            "int8_products": int8["saved_model_int8_products"]}


def test_the_real_exports_use_only_the_runtime_s_ops(exports):
    for name, path in exports.items():
        assert unregistered_ops(path) == {}, name
        require_serving_ops(path)
        used = {node.op for nodes in serving_runtime.saved_model_nodes(path).values() for node in nodes}
        # The in-graph tokenizer's tensorflow-text ops are among them, so the list holds those too.
        assert any(op.startswith("FastWordpiece") for op in used), (name, sorted(used))
