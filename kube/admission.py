"""A ValidatingAdmissionPolicy that denies what its validations refuse, and the binding that puts it in force
(`Deny` on every matching request; a failure to evaluate denies too): the agent's own-node and own-starts
policies and the host-path policy are each one of these."""

from __future__ import annotations

from collections.abc import Sequence

from cdk8s_plus_33 import k8s
from constructs import Construct


def deny_policy(
    scope: Construct,
    id: str,
    *,
    name: str,
    labels: dict[str, str],
    operations: Sequence[str],
    resources: Sequence[str],
    validations: Sequence[k8s.Validation],
    variables: Sequence[k8s.Variable] | None = None,
    match_conditions: Sequence[k8s.MatchCondition] | None = None,
    more_rules: Sequence[tuple[Sequence[str], Sequence[str]]] = (),
) -> tuple[k8s.KubeValidatingAdmissionPolicy, k8s.KubeValidatingAdmissionPolicyBinding]:
    """The policy (core API group, v1) and its binding, applied after it. `more_rules`: (operations, resources)
    matched besides `operations` on `resources`."""
    policy = k8s.KubeValidatingAdmissionPolicy(
        scope,
        id,
        metadata=k8s.ObjectMeta(name=name, labels=labels),
        spec=k8s.ValidatingAdmissionPolicySpec(
            failure_policy="Fail",
            match_constraints=k8s.MatchResources(
                resource_rules=[
                    k8s.NamedRuleWithOperations(
                        api_groups=[""], api_versions=["v1"], operations=list(ops), resources=list(kinds)
                    )
                    for ops, kinds in [(operations, resources), *more_rules]
                ]
            ),
            match_conditions=list(match_conditions) if match_conditions is not None else None,
            variables=list(variables) if variables is not None else None,
            validations=list(validations),
        ),
    )
    binding = k8s.KubeValidatingAdmissionPolicyBinding(
        scope,
        f"{id}Binding",
        metadata=k8s.ObjectMeta(name=name, labels=labels),
        spec=k8s.ValidatingAdmissionPolicyBindingSpec(policy_name=name, validation_actions=["Deny"]),
    )
    binding.add_dependency(policy)
    return policy, binding
