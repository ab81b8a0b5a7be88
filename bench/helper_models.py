"""torchvision's MobileNetV2 built with onnx.helper (no torch needed): the same layers, strides, channels and
ReLU6 / residual structure as `torchvision.models.mobilenet_v2` (width 1.0), BatchNorm folded away (each conv has
a random bias), random He-scaled weights; node names follow torch's export (`/features/features.N/...`) so the
benches group ops by block the same way.  ResNet-18's counterpart is `tileplan.frontend.zoo.resnet18`."""

from __future__ import annotations

from typing import Any

# torchvision's inverted residual settings: expansion t, output channels c, repeats n, first stride s
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
            (6, 320, 1, 1))


def mobilenet_v2(seed: int = 0, size: int = 224, classes: int = 1000) -> Any:
    from tileplan.frontend.zoo import _Graph

    g = _Graph(seed)
    x = g.conv("input", 3, 32, stride=2, relu="relu6", name="/features/features.0/features.0.0/Conv")
    cin, idx = 32, 1
    for t, c, n, s in SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            p = f"/features/features.{idx}/conv"
            hidden = cin * t
            y = x
            if t != 1:
                y = g.conv(y, cin, hidden, k=1, relu="relu6", name=f"{p}/conv.0/conv.0.0/Conv")
            y = g.conv(y, hidden, hidden, stride=stride, group=hidden, relu="relu6",
                       name=f"{p}/conv.{1 if t != 1 else 0}/conv.{1 if t != 1 else 0}.0/Conv")
            y = g.conv(y, hidden, c, k=1, relu="", name=f"{p}/conv.{2 if t != 1 else 1}/Conv")
            x = g.op("Add", [x, y], f"/features/features.{idx}/Add") if stride == 1 and cin == c else y
            cin, idx = c, idx + 1
    x = g.conv(x, cin, 1280, k=1, relu="relu6", name="/features/features.18/features.18.0/Conv")
    y = g.op("GlobalAveragePool", [x], "/GlobalAveragePool")
    y = g.op("Flatten", [y], "/Flatten")
    y = g.dense(y, 1280, classes, name="/classifier/classifier.1/Gemm")
    return g.model("mobilenet_v2", {"input": [1, 3, size, size]}, y, [1, classes])
