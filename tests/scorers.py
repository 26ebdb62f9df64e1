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


class HangsOnceScorer:
    """The first scoring process to call it never answers (it creates ``marker`` and sleeps); a later one returns
    the size of what it was given."""

    def __init__(self, marker):
        self.marker = marker

    def __call__(self, detections):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            while True:
                time.sleep(1)
        return {"size": len(detections)}
