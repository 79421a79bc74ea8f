"""The training recipes of the drafter kinds training builds, one module each (`recipe.py`);
the drafter registry names them (`drafting.registry.Kind.training`)."""
