"""Figures: functions ``(data, ax) -> ax`` (``figures``, ``lessons``) and the report builder; no simulation inside."""
