"""Pure statistics: descriptive summaries, two-sample comparison, change-point detection.

Standard library only and no madengine imports (``summary.py`` and ``distributions.py`` are also
copied into containers by the ONNX harness). See docs/statistics.md.
"""
