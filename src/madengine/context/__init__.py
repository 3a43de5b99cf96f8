"""The run-time context: host detection, user overrides, Dockerfile selection."""

from madengine.context.context import (Context, build_context, deep_merge, load_context_file,
                                       parse_context_string, validate_context)
from madengine.context.dockerfiles import Dockerfile, select_dockerfiles

__all__ = ["Context", "build_context", "deep_merge", "load_context_file", "parse_context_string",
           "validate_context", "Dockerfile", "select_dockerfiles"]
