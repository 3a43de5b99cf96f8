"""Benchmark the PyTorch models inside a script (``madengine bench SCRIPT.py``).

Three steps, as MLAgility's ``benchit``: :mod:`.analysis` runs the script under a hook and finds
every ``nn.Module`` it calls; :mod:`.export` exports each selected one to ONNX with the observed
shapes and optimises it with ONNX Runtime, in the build cache (:mod:`madengine.bench.cache.builds`);
:mod:`.runner` benchmarks the build on ONNX Runtime and the module on PyTorch eager with the
harness's loop and statistics, checks their outputs against each other and records perf.csv rows.
torch is imported only inside the functions that need it; :mod:`.parsing` and :mod:`.results`
never import it.
"""
