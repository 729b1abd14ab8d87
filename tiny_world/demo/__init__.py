"""`mrjudge demo`: the judge's whole life on the embedded world, stage by stage, resumable (`runner`).

One idea per module: `config` (`DemoConfig`, every budget; the judge's recipe fields are `TinyJudgeRecipe`'s),
`stages` (the stages in order, each declaring the config fields its hash covers and reading no others),
`runner` (runs or resumes them by their hashes; reads a finished demo folder back), `summary` (the headline
figures, the terminal's tables and `report.md`, rebuilt from the stages' records on every run).
"""
