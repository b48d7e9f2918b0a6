"""Errors raised by the ZooKeeper layer (a leaf module: the controller and the brokers import
it, it imports nothing of theirs)."""
from __future__ import annotations

from odradek.common.errors import StartupRefusedError


class ControllerMovedError(Exception):
    """A fenced write failed its check on /controller_epoch: another controller has been elected.

    Raised (never returned as a result entry) so it unwinds the whole event; the controller
    catches it in one place and resigns, like Kafka's ControllerMovedException. Part of the
    controller's ControllerZk seam (controller/seams.py), which the simulation's fakes raise too.
    """


class TopicExistsError(Exception):
    """create_topic found /brokers/topics/T or /config/topics/T already there."""


class BrokerIdInUseError(StartupRefusedError):
    """Another live broker (not a previous session of ours) holds /brokers/ids/N."""


class StaleEphemeralError(TimeoutError):
    """An ephemeral znode left by a previous session of ours did not go away in time."""


class RequestTooLargeError(ValueError):
    """A write that would exceed ZooKeeper's jute.maxbuffer, refused before it is sent."""


class ZooKeeperAuthError(StartupRefusedError):
    """ZooKeeper refused our SASL login (wrong username or password), or requires one that
    this client has no credentials for."""
