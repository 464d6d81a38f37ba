"""Pure judgement: facts -> findings, logs -> explanations, samples -> verdicts. No I/O here."""
