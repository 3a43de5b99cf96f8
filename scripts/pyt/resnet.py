"""ResNet-18/34/50/101/152 in plain torch, shaped like torchvision's ``resnet*`` models (the same
layers, widths and parameter counts), so that no torchvision build has to match the torch wheel."""

from __future__ import annotations

from torch import nn

# blocks per stage of each depth, and whether it uses bottleneck blocks (torchvision's table)
ARCHS = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet34": ((3, 4, 6, 3), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
    "resnet152": ((3, 8, 36, 3), True),
}


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False), nn.BatchNorm2d(c_out)]


class Block(nn.Module):
    """A residual block: basic (two 3x3 convolutions) or bottleneck (1x1, 3x3, 1x1 with 4x expansion)."""

    def __init__(self, c_in: int, width: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        c_out = width * 4 if bottleneck else width
        if bottleneck:
            layers = [*_conv_bn(c_in, width, 1), nn.ReLU(inplace=True), *_conv_bn(width, width, 3, stride),
                      nn.ReLU(inplace=True), *_conv_bn(width, c_out, 1)]
        else:
            layers = [*_conv_bn(c_in, width, 3, stride), nn.ReLU(inplace=True), *_conv_bn(width, width, 3)]
        self.body = nn.Sequential(*layers)
        self.shortcut = nn.Sequential(*_conv_bn(c_in, c_out, 1, stride)) if stride != 1 or c_in != c_out \
            else nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, arch: str = "resnet50", num_classes: int = 1000) -> None:
        super().__init__()
        blocks, bottleneck = ARCHS[arch]
        layers: list[nn.Module] = [*_conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        c_in = 64
        for stage, count in enumerate(blocks):
            width = 64 * 2 ** stage
            for i in range(count):
                layers.append(Block(c_in, width, 2 if i == 0 and stage > 0 else 1, bottleneck))
                c_in = width * 4 if bottleneck else width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.features(x)).flatten(1))
