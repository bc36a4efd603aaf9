r"""Write circuit-tracer's graph JSON schema (its own pydantic classes) as a test fixture.

Run in the side environment that has circuit-tracer 0.5.0 (not the project's):
    /work/sidenv/ct/bin/python scripts/sidenv/circuit_tracer_schema.py \
        tests/features/fixtures/circuit_tracer_graph_schema.json
The schema is ``circuit_tracer.frontend.graph_models.Model.model_json_schema()``; circuit-tracer is MIT-licensed
(Copyright (c) 2024 Michael Hanna and Mateusz Piotrowski), noted in the fixture.
"""

import json
import sys
from importlib.metadata import version

from circuit_tracer.frontend.graph_models import Model

schema = Model.model_json_schema()
schema["$comment"] = (
    f"circuit-tracer {version('circuit-tracer')}: circuit_tracer/frontend/graph_models.py Model."
    "model_json_schema(). MIT License, Copyright (c) 2024 Michael Hanna and Mateusz Piotrowski."
)
with open(sys.argv[1], "w") as f:
    json.dump(schema, f, indent=1, sort_keys=True)
    f.write("\n")
print("wrote", sys.argv[1])
