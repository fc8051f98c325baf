"""Pictures and reports from results files and engine traces: plots.py draws (matplotlib, Agg),
markdown.py and html.py write self-contained reports, build.py ties them together."""

from ncclprobe.report.build import ReportFiles, build_report

__all__ = ["ReportFiles", "build_report"]
