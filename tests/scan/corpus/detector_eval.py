"""Evaluate a single-stage detector: the model decodes boxes in forward; NMS and matching run after."""

import torch
import torch.nn as nn
import torchvision
from torchvision.ops import box_iou, nms


class Head(nn.Module):
    def __init__(self, channels=256, num_classes=80, anchors=9):
        super().__init__()
        self.cls = nn.Conv2d(channels, anchors * num_classes, 3, padding=1)
        self.box = nn.Conv2d(channels, anchors * 4, 3, padding=1)
        self.num_classes = num_classes

    def forward(self, feature):
        n = feature.shape[0]
        logits = self.cls(feature).permute(0, 2, 3, 1).reshape(n, -1, self.num_classes)
        deltas = self.box(feature).permute(0, 2, 3, 1).reshape(n, -1, 4)
        return logits, deltas


class Detector(nn.Module):
    def __init__(self, score_threshold=0.05):
        super().__init__()
        backbone = torchvision.models.resnet50()
        self.backbone = nn.Sequential(*list(backbone.children())[:-2], nn.Conv2d(2048, 256, 1))
        self.head = Head()
        self.score_threshold = score_threshold

    def forward(self, images, anchors):
        logits, deltas = self.head(self.backbone(images))
        scores, labels = logits.sigmoid().max(-1)
        boxes = self.decode(anchors, deltas)
        keep = scores > self.score_threshold
        return [(b[k], s[k], lab[k]) for b, s, lab, k in zip(boxes, scores, labels, keep)]

    def decode(self, anchors, deltas):
        wh = anchors[..., 2:] - anchors[..., :2]
        centers = anchors[..., :2] + 0.5 * wh + deltas[..., :2] * wh
        size = wh * deltas[..., 2:].exp()
        return torch.cat([centers - size / 2, centers + size / 2], -1)


def match(pred_boxes, gt_boxes, iou_threshold=0.5):
    if len(gt_boxes) == 0:
        return torch.zeros(len(pred_boxes), dtype=torch.bool)
    iou = box_iou(pred_boxes, gt_boxes)
    best, _ = iou.max(1)
    return best >= iou_threshold


@torch.no_grad()
def evaluate(model, loader, anchors, device):
    model.eval()
    hits = total = 0
    for images, targets in loader:
        detections = model(images.to(device), anchors)
        for (boxes, scores, labels), target in zip(detections, targets):
            kept = nms(boxes, scores, 0.5)
            matched = match(boxes[kept].cpu(), target["boxes"])
            hits += matched.sum().item()
            total += len(target["boxes"])
    return hits / max(total, 1)
