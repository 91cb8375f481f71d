"""Where the environment's alarms go: an SNS topic (encrypted, TLS only) with the configured email
subscriptions, or an existing topic named in the config (its policy must let cloudwatch.amazonaws.com
publish, as this one's does)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from warmstart.config.operations import Alerts


class AlertTopic(Construct):
    def __init__(self, scope: Construct, id: str, *, environment: str, alerts: Alerts) -> None:
        super().__init__(scope, id)
        self.key = None
        if alerts.topic_arn:
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "Topic", alerts.topic_arn)
            return
        # A key of our own: CloudWatch must be let use it to publish an alarm to an encrypted topic, which the
        # AWS-managed SNS key's policy never allows (SNS developer guide, "Configure SSE for CloudWatch alarms").
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
            description=f"warmstart {environment} alarm topic",
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
            )
        )
        self.topic = sns.Topic(
            self, "Topic", display_name=f"warmstart {environment} alarms", master_key=self.key, enforce_ssl=True
        )
        # The topic policy CDK writes (TLS only) replaces SNS's default one, and an alarm action grants nothing:
        # without this statement CloudWatch is refused SNS:Publish and no alarm is ever delivered. Only this
        # account's alarms (SNS developer guide, "Preventing cross-service confused deputy").
        stack = Stack.of(self)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"
                    },
                },
            )
        )
        for email in alerts.emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))

    def notify(self, alarms: list[cloudwatch.Alarm]) -> None:
        for alarm in alarms:
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.topic))
