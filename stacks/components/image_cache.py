"""Container image pre-pull DaemonSets (one per distinct serving image) on the GPU pool."""

from __future__ import annotations

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from k8s.image_cache import ImageCacheChart


class ImageCache(Construct):
    def __init__(
        self, scope: Construct, id: str, *, cluster: eks.Cluster, charts: cdk8s.App, images: list[str], pause_image: str
    ) -> None:
        super().__init__(scope, id)
        self.chart = ImageCacheChart(charts, "ImageCache", images=images, pause_image=pause_image)
        self.manifest = cluster.add_cdk8s_chart("ImageCache", self.chart)
