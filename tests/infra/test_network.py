from aws_cdk.assertions import Match

from construct_kit.network import subnet_masks


def test_s3_is_reached_through_a_gateway_endpoint_on_every_private_route_table(created):
    template = created.template_json("network")
    resources = template["Resources"]
    endpoints = [r for r in resources.values() if r["Type"] == "AWS::EC2::VPCEndpoint"]
    assert len(endpoints) == 1, "exactly one endpoint: the S3 gateway (no Interface endpoint)"
    endpoint = endpoints[0]["Properties"]
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert "s3" in str(endpoint["ServiceName"])
    private_tables = {
        logical_id
        for logical_id, r in resources.items()
        if r["Type"] == "AWS::EC2::RouteTable" and "private" in logical_id
    }
    public_tables = {
        logical_id
        for logical_id, r in resources.items()
        if r["Type"] == "AWS::EC2::RouteTable" and "public" in logical_id
    }
    associated = {ref["Ref"] for ref in endpoint["RouteTableIds"]}
    assert len(private_tables) == len(created.config.network.availability_zones)
    assert associated == private_tables
    assert not associated & public_tables


def test_private_subnets_egress_through_nat_and_span_the_configured_azs(created):
    template = created.template("network")
    template.resource_count_is("AWS::EC2::NatGateway", created.config.network.nat_gateways)
    zones = created.config.network.availability_zones
    for zone in zones:
        template.has_resource_properties(
            "AWS::EC2::Subnet",
            {
                "AvailabilityZone": zone,
                "MapPublicIpOnLaunch": False,
                "Tags": Match.array_with([{"Key": "kubernetes.io/role/internal-elb", "Value": "1"}]),
            },
        )
    template.has_resource_properties(
        "AWS::EC2::Route", {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": Match.any_value()}
    )


def test_flow_logs_capture_all_traffic_with_retention(created):
    template = created.template("network")
    template.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL", "ResourceType": "VPC"})
    template.has_resource_properties(
        "AWS::Logs::LogGroup", {"RetentionInDays": created.config.network.flow_log_retention_days}
    )


def test_subnet_masks_leave_room_for_three_azs():
    assert subnet_masks("10.0.0.0/16") == (22, 18)
    assert subnet_masks("10.0.0.0/20") == (26, 22)
