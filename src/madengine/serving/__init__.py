"""Serving benchmarks: load points against an OpenAI-compatible endpoint, one perf.csv row each.

``madengine serve-bench`` (:mod:`.bench`) and the ``serving`` block of models.json
(:mod:`.models_json`) share everything here: the load points (:mod:`.loadpoints`), the prompts
(:mod:`.prompts`), the streamed requests on aiohttp (:mod:`.client`, imported only when requests
are sent), the load generator (:mod:`.loadgen`), readiness (:mod:`.readiness`), the figures of a
load point as vLLM's benchmark defines them (:mod:`.metrics`) and its row's columns
(:mod:`.columns`). See docs/serving.md.
"""
