"""Everything warmstart applies, through a real API server: every manifest CDK embeds and every file in dist/, for
both shipped environments, after the custom resource definitions the cluster serves (Karpenter's real CRDs with
their CEL rules; for Auto Mode our NodeClass schema). Server-side dry run, then server-side apply, strict field
validation: no rejection, no warning."""

from __future__ import annotations

import pytest

from tests.cluster.api import Api
from tests.cluster.crds import crds_for
from tests.cluster.environment import apply_all, rendered_objects

pytestmark = pytest.mark.control_plane


def test_every_object_of_each_environment_is_accepted_without_a_warning(shipped, start_plane, tmp_path):
    api = Api(start_plane())
    objects = rendered_objects(shipped, tmp_path)
    assert not apply_all(api, objects, crds_for(shipped.config))
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "NodePool", "ValidatingAdmissionPolicy", "NetworkPolicy"} <= kinds
