"""Data providers (``data.json``) and credentials (``credential.json``).

``provide_data`` is the runner's hook that makes a model's data sets available before its
script starts; ``check_run_inputs`` validates both files before a run begins;
``madengine.data.credentials`` holds git clone auth and model ``cred`` handling.
"""

from madengine.data.config import PROVIDER_ORDER, DataConfig, ProviderConfig, load_data_config
from madengine.data.credentials import Credentials, apply_model_credentials, git_environment, load_credentials
from madengine.data.provide import Delivery, check_run_inputs, provide_data

__all__ = ["PROVIDER_ORDER", "DataConfig", "ProviderConfig", "load_data_config", "Credentials",
           "apply_model_credentials", "git_environment", "load_credentials", "Delivery", "check_run_inputs",
           "provide_data"]
