"""Example torch models for `parasim torch-model`, written here in plain torch (no torchvision).

`resnet50`: ResNet-50 as He et al. 2016 ("Deep Residual Learning for Image Recognition", CVPR) Table 1
describes it: a 7x7/2 convolution with 64 filters and a 3x3/2 max pool, then four stages of bottleneck
blocks (1x1, 3x3, 1x1 convolutions; Fig. 5 right) repeated [3, 4, 6, 3] times with widths 64, 128, 256,
512 and outputs 4x wider (256, 512, 1024, 2048), batch normalisation after every convolution (§3.4),
projection shortcuts (1x1 convolutions, option B of §3.3) where the shape changes, global average
pooling and a 1000-way fully connected layer. Published figures: 3.8e9 FLOPs (multiply-adds) per
224x224 image (Table 1), 25,557,032 parameters (torchvision's `resnet50`, the same architecture).

`stride_in_1x1` places each stage's down-sampling stride where the paper does (True: the first 1x1
convolution of the stage's first block, "conv3_1, conv4_1, and conv5_1 with a stride of 2", §3.4) or
where torchvision and NVIDIA's recipes put it (False: on the 3x3 convolution, "ResNet v1.5", 4.09e9
multiply-adds per image per torchvision's model card). The parameter count does not depend on it.

`mlp` and `small_convnet` are small models the tests check against closed forms.
"""
from __future__ import annotations

__all__ = ["resnet50", "mlp", "small_convnet", "RESNET50_STAGES"]

RESNET50_STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))  # (bottleneck width, blocks): Table 1, 50-layer
EXPANSION = 4  # a bottleneck block's output is 4x its width (Fig. 5 right: 64 -> 256)


def _bottleneck_class():
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        """1x1 (width) -> 3x3 (width) -> 1x1 (4 x width), BN after each, ReLU after the first two and
        after the residual sum; a 1x1 projection shortcut where the shape changes (He et al. 2016 Fig. 5)."""

        def __init__(self, in_ch: int, width: int, stride: int, stride_in_1x1: bool):
            super().__init__()
            out_ch = width * EXPANSION
            s1, s3 = (stride, 1) if stride_in_1x1 else (1, stride)
            self.conv1 = nn.Conv2d(in_ch, width, 1, stride=s1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=s3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out_ch)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or in_ch != out_ch:
                self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(out_ch))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    return Bottleneck


def resnet50(num_classes: int = 1000, *, stride_in_1x1: bool = True):
    """ResNet-50 (He et al. 2016 Table 1) as an `nn.Sequential` whose children are its top-level layers
    in order: stem (conv1, bn1, relu, max pool), layer1..layer4 (conv2_x..conv5_x), avgpool (global
    average pooling and flatten), fc."""
    from torch import nn

    bottleneck = _bottleneck_class()
    stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                         nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
    layers, in_ch = [], 64
    for i, (width, blocks) in enumerate(RESNET50_STAGES):
        stride = 1 if i == 0 else 2  # conv2_x follows the max pool at 56x56; the others halve the size
        stage = []
        for j in range(blocks):
            stage.append(bottleneck(in_ch, width, stride if j == 0 else 1, stride_in_1x1))
            in_ch = width * EXPANSION
        layers.append(nn.Sequential(*stage))
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1))
    names = ["stem", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"]
    from collections import OrderedDict

    return nn.Sequential(OrderedDict(zip(names, [stem, *layers, head, nn.Linear(in_ch, num_classes)])))


def mlp(widths=(1024, 4096, 4096, 1024), *, bias: bool = False):
    """Linear + ReLU stack: Linear(widths[i], widths[i+1]) then ReLU, for each consecutive pair."""
    from torch import nn

    mods = []
    for a, b in zip(widths[:-1], widths[1:]):
        mods += [nn.Linear(a, b, bias=bias), nn.ReLU()]
    return nn.Sequential(*mods)


def small_convnet(channels=(3, 32, 64), *, kernel: int = 3, num_classes: int = 10):
    """Conv(k, padding k//2, no bias) + ReLU per channel pair, then global average pool and a Linear head."""
    from torch import nn

    mods = []
    for a, b in zip(channels[:-1], channels[1:]):
        mods += [nn.Conv2d(a, b, kernel, padding=kernel // 2, bias=False), nn.ReLU()]
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(channels[-1], num_classes)]
    return nn.Sequential(*mods)
