"""mr-judge core: item and verdict types, the MC prompt and parser, backends and the judge."""
