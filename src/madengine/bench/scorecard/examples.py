"""A small example suite of real architectures with random weights, built here (nothing downloaded).

``python -m madengine.bench.scorecard.examples DIR`` writes ``DIR/suite.yaml`` and its ONNX files:

* ``vision/resnet18@1``: ResNet-18 (basic blocks 2-2-2-2, widths 64-512, 11,689,512 parameters, the
  same as torchvision's ``resnet18``) from a transformers ``ResNetConfig``;
* ``vision/mobilenet_v2@1``: MobileNetV2 (width 1.0) from a transformers ``MobileNetV2Config``;
* ``nlp/bert_small@1``: a BERT-shaped encoder (``BertConfig``: 2 layers, hidden 128, 2 heads) with
  named dynamic axes ``batch`` and ``sequence`` that the suite fills with ``$axes``.

Weights are random (``torch.manual_seed``) but the outputs mean something, so that the scorecard's
output check can fail: MobileNetV2's BatchNorm statistics are those of its own activations on random
images (:func:`calibrate_batch_norm`; with the initial statistics, mean 0 and variance 1, its logits
shrink layer by layer to about 1e-22, an answer any check would pass or none could judge); ResNet-18's
logits are about 0.1 and depend on the image with the initial ones. Both are exported in eval mode. BERT takes its attention mask as the additive
``(1 - mask) · float32 min`` term of the original BERT (the same numbers as transformers' own mask
code, which exports a 0-d ConstantOfShape and a dynamic Expand that TVM's ONNX frontend rejects), so
every CPU backend, TVM included, runs every model. Exported with ``torch.onnx.export`` (the TorchScript
exporter) at opset :data:`OPSET` and stamped with IR version :data:`IR_VERSION`, which every
onnxruntime since 1.15 loads. torchvision is not used: its wheels for this torch are CUDA builds that
do not load beside the CPU build of torch (``pip install 'madengine[torch]'`` installs the CPU torch
and transformers). Images are ``IMAGE_SIZE`` pixels square so that an untuned TVM build finishes in
seconds; the suite records every file's sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

OPSET = 17
IR_VERSION = 8
IMAGE_SIZE = 64
SEQUENCE = 32


def _torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"the example models need torch and transformers ({exc}): pip install 'madengine[torch]'")
    return torch


def export(module: Any, args: tuple, path: Path, input_names: list[str], output_names: list[str],
           dynamic_axes: dict[str, dict[int, str]] | None = None) -> Path:
    """``module`` (eval mode) → ONNX at OPSET with IR_VERSION; returns ``path``."""
    import contextlib
    import io
    import warnings

    import onnx

    torch = _torch()
    module.eval()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=OPSET, dynamo=False)
    model = onnx.load(str(path))
    model.ir_version = IR_VERSION
    onnx.save(model, str(path))
    return path


def calibrate_batch_norm(model: Any, image_size: int, batches: int = 8, batch: int = 8) -> Any:
    """``model`` in eval mode with BatchNorm statistics of its own: the running mean and variance
    of every BatchNorm layer become the average over ``batches`` batches of random images (what a
    trained network's statistics are: those of the activations it sees). Deterministic under the
    caller's ``torch.manual_seed``."""
    torch = _torch()
    for layer in model.modules():
        if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm):
            layer.reset_running_stats()
            layer.momentum = None  # a cumulative average over the batches, not an exponential one
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(pixel_values=torch.rand(batch, 3, image_size, image_size))
    return model.eval()


class _Logits:
    """A transformers image classifier as ``pixel_values → logits`` (what the export traces)."""

    @staticmethod
    def wrap(model: Any) -> Any:
        torch = _torch()

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = model

            def forward(self, pixel_values):
                return self.inner(pixel_values=pixel_values).logits

        return Wrapped()


def build_resnet18(path: Path, image_size: int = IMAGE_SIZE) -> Path:
    torch = _torch()
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(num_channels=3, embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                          layer_type="basic", hidden_act="relu", num_labels=1000)
    model = _Logits.wrap(ResNetForImageClassification(config))
    return export(model, (torch.rand(1, 3, image_size, image_size),), path, ["pixel_values"], ["logits"])


def build_mobilenet_v2(path: Path, image_size: int = IMAGE_SIZE, tf_padding: bool = False,
                       calibrate: bool = True) -> Path:
    """``tf_padding=True`` computes TensorFlow-style "same" padding from the input at run time: a Pad
    with dynamic pads, which TVM's ONNX frontend does not support (an UNSUPPORTED cell).
    ``calibrate=False`` keeps the initial BatchNorm statistics: logits of about 1e-22 (a degenerate
    reference, for the tests of the check)."""
    torch = _torch()
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    torch.manual_seed(0)
    config = MobileNetV2Config(num_labels=1000, image_size=image_size, tf_padding=tf_padding)
    network = MobileNetV2ForImageClassification(config)
    model = _Logits.wrap(calibrate_batch_norm(network, image_size) if calibrate else network.eval())
    return export(model, (torch.rand(1, 3, image_size, image_size),), path, ["pixel_values"], ["logits"])


def build_bert(path: Path, *, layers: int = 2, hidden: int = 128, heads: int = 2, sequence: int = SEQUENCE,
               dynamic: bool = True) -> Path:
    """A BERT encoder ``(input_ids, attention_mask) → last_hidden_state``, with named dynamic axes
    ``batch``/``sequence`` (``dynamic=False``: fixed at 1 × ``sequence``). The mask (1 = attend,
    0 = padding) goes in as BERT's additive term: the numbers of transformers' own mask code, in
    operators every backend imports."""
    torch = _torch()
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, vocab_size=1000, max_position_embeddings=128)
    bert = BertModel(config)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            additive = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
            return self.bert(input_ids=input_ids, attention_mask=additive).last_hidden_state

    ids = torch.ones(1, sequence, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    dynamic_axes = {"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes} if dynamic else None
    return export(Encoder(), (ids, torch.ones_like(ids)), path, ["input_ids", "attention_mask"], ["last_hidden_state"],
                  dynamic_axes)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_example_suite(folder: Path) -> Path:
    """The three models and ``suite.yaml`` in ``folder``; returns the suite's path."""
    import yaml

    folder = Path(folder)
    (folder / "onnx").mkdir(parents=True, exist_ok=True)
    resnet = build_resnet18(folder / "onnx" / "resnet18.onnx")
    mobilenet = build_mobilenet_v2(folder / "onnx" / "mobilenet_v2.onnx")
    bert = build_bert(folder / "onnx" / "bert_small.onnx")
    models = [
        {"set": "vision", "name": "resnet18", "version": 1, "path": "onnx/resnet18.onnx", "sha256": sha256_of(resnet)},
        # unit-scale activations through 50 layers of random depthwise convolutions: kernels that sum in
        # another order (fused, vectorised differently on another CPU) differ by up to about 1e-4 of the
        # logits' scale in float32
        {"set": "vision", "name": "mobilenet_v2", "version": 1, "path": "onnx/mobilenet_v2.onnx",
         "sha256": sha256_of(mobilenet), "tolerance": {"atol": 1e-3, "rtol": 1e-3}},
        {"set": "nlp", "name": "bert_small", "version": 1, "path": "onnx/bert_small.onnx", "sha256": sha256_of(bert),
         "$axes": {"batch": 1, "sequence": SEQUENCE}, "tolerance": {"atol": 1e-4, "rtol": 1e-3}},
    ]
    suite = folder / "suite.yaml"
    suite.write_text(yaml.safe_dump({"models": models}, sort_keys=False), encoding="utf-8")
    return suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m madengine.bench.scorecard.examples",
                                     description="Build the example scorecard suite (needs madengine[torch]).")
    parser.add_argument("folder", help="where suite.yaml and onnx/*.onnx are written")
    args = parser.parse_args(argv)
    suite = build_example_suite(Path(args.folder))
    print(suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
