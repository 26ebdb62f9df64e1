"""Scorers for BackgroundScorer tests, importable by its spawned scoring process (no torch: it starts at once)."""
import os
import time


class HeldScorer:
    """Holds each scoring until the file ``release`` exists; returns the size of what it was given."""

    def __init__(self, release):
        self.release = release

    def __call__(self, detections):
        while not os.path.exists(self.release):
            time.sleep(0.01)
        return {"size": len(detections)}
