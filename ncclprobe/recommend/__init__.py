"""From measurements to settings: read results, exclude what is unsafe, weigh by the workload.

`build_recommendation(paths, ...)` is the library entry the CLI and the report call; the pieces
live one concern per module: load (results -> curves, exclusions), noise (trial spread),
workload (size histogram), select (per-size winners, one global setting), safety (LL128, lint),
emit (env snippet, tuner CSV, JSON).
"""

from ncclprobe.recommend.recommendation import Recommendation, build_recommendation

__all__ = ["Recommendation", "build_recommendation"]
