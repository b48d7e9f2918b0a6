"""Errors raised by the ZooKeeper layer.

A fenced controller write raises odradek.controller.seams.ControllerMovedError: it belongs to
the ControllerZk seam, which the fakes implement too.
"""
from __future__ import annotations


class TopicExistsError(Exception):
    """create_topic found /brokers/topics/T or /config/topics/T already there."""


class BrokerIdInUseError(Exception):
    """Another live broker (not a previous session of ours) holds /brokers/ids/N."""


class StaleEphemeralError(TimeoutError):
    """An ephemeral znode left by a previous session of ours did not go away in time."""


class RequestTooLargeError(ValueError):
    """A write that would exceed ZooKeeper's jute.maxbuffer, refused before it is sent."""
