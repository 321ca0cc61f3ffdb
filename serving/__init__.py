"""Serving exported GNMT SavedModels with TF Serving's REST and gRPC protocols.

A local server, ``python -m serving.server`` (``server.py``: flags and lifetime;
``core.py``, ``models.py``: versions found under a base path, loaded, warmed up,
switched and unloaded; ``batching.py``; ``rest.py`` and ``grpc_service.py``: the two
front ends; ``tensors.py``: input checks; ``config.py``: the model config and
batching parameters files; ``errors.py``: TF Serving's status codes), a stand-in for
``tensorflow_model_server`` where that binary is not available. A client,
``python -m serving.client`` (``client.py``, REST and gRPC with tensorflow-serving-api),
that uses only TF Serving's documented protocol and so works with either server.
Launch files for the real TF Serving: ``run_tf_serving.sh``, ``models.config`` and
``batching_parameters.txt``. See docs/serving.md.
"""
