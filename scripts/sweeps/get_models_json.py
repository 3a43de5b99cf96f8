"""Models made in code: one matmul model per size (the third catalog source)."""

from madengine.utils.discover_models import CustomModel


class MatmulModel(CustomModel):
    def update_model(self):
        # called when the model is selected; a real repository could pin a data version here
        self.args = f"--size {self.name.rsplit('_', 1)[-1]} --repeats 5"


def list_models():
    return [
        MatmulModel(name=f"matmul_{size}", dockerfile="../../docker/examples", scripts="../examples/matmul.py",
                    n_gpus="1", timeout=600, tags=["examples", "numpy", "sweeps"], training_precision="fp32")
        for size in (256, 512)
    ]
