"""`mrjudge demo`: the judge's whole life on the embedded world, stage by stage, resumable (`runner`)."""
