"""circuit-tracer's side of benchmarks/bench_features.py: run circuit-tracer 0.5.0 on the inputs interp used,
time it, compare its adjacency with interp's, and validate interp's graph export with circuit-tracer's own code.

Runs in a side environment, never in interp's (circuit-tracer pins transformers 4.57, transformer-lens 3.2):

    python -m venv /work/sidenv/ct
    /work/sidenv/ct/bin/pip install torch==2.13.0                      # first, so the CPU build is taken
    /work/sidenv/ct/bin/pip install circuit-tracer==0.5.0 "nnsight<0.8"   # nnsight 0.8.1 breaks its import
    /work/sidenv/ct/bin/python scripts/compare_circuit_tracer.py WORKDIR

WORKDIR (written by benchmarks/bench_features.py in interp's environment) holds ``model/`` (smollm2 as a local
Hugging Face folder), ``tc/`` (transcoders in circuit-tracer's format with ``config.yaml``),
``interp_graph.pt`` (interp's adjacency and node table) and ``interp_graph.json`` (interp's export).
circuit-tracer runs on its nnsight backend (its transformer-lens backend refuses a local folder's name).

Comparison, on shared nodes (features by (layer, position, feature), error nodes by (layer, position), tokens by
position, logits by token id): circuit-tracer zeroes every feature and error vector at the BOS position (interp
keeps them: its BOS features are interp-only nodes, and its BOS error nodes, which carry the BOS MLP write that
circuit-tracer leaves without a node, are not compared) and its logit nodes are demeaned (its target is
logit_k − mean_v logit_v, interp's is logit_k), so its logit rows differ from interp's by one row, the mean logit's,
common to every logit:

* features' rows: max |A_interp − A_ct| / max |A| over every shared (target, source) pair;
* logit rows: the same after removing the common row (A_interp[k] − A_ct[k] − mean_k(A_interp − A_ct));
* interp's ``interp_graph.json`` validates against ``circuit_tracer.frontend.graph_models.Model``, and
  circuit-tracer's own ``create_graph_files`` on a circuit-tracer ``Graph`` holding interp's adjacency keeps the
  same nodes (error ids renamed: its ``0_{layer}_{pos}``, interp's ``err_{layer}_{pos}``) and links, with equal
  weights.

Writes WORKDIR/comparison.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import yaml  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument(
        "--batch-sizes",
        default="512,64,32",
        help="circuit-tracer's batch sizes to time (512 is its default); the graph compared is the last's",
    )
    a = ap.parse_args()
    work = Path(a.workdir).resolve()
    from circuit_tracer import ReplacementModel, attribute
    from circuit_tracer.utils.hf_utils import load_transcoders

    ours = torch.load(work / "interp_graph.pt", weights_only=False)
    conf = yaml.safe_load((work / "tc" / "config.yaml").read_text())
    if conf["model_kind"] == "cross_layer_transcoder":  # its load_transcoders wants a hub repo_id for a CLT
        from circuit_tracer.transcoder.cross_layer_transcoder import load_clt

        tset = load_clt(
            str(work / "tc"),
            feature_input_hook=conf["feature_input_hook"],
            feature_output_hook=conf["feature_output_hook"],
            scan=conf.get("scan"),
            device=torch.device("cpu"),
            dtype=torch.float32,
            lazy_decoder=False,
        )
    else:
        tset = load_transcoders(conf, device=torch.device("cpu"), dtype=torch.float32)
    rm = ReplacementModel.from_pretrained_and_transcoders(
        str(work / "model"), tset, backend="nnsight", device=torch.device("cpu"), dtype=torch.float32
    )
    tokens = torch.tensor(ours["tokens"])
    timing = {}
    for bs in [int(b) for b in a.batch_sizes.split(",")]:
        secs, cpu = [], []
        for _ in range(3):  # a warm-up run, then two timed ones (interp does the same)
            t0, c0 = time.perf_counter(), time.process_time()
            g = attribute(tokens, rm, batch_size=bs, max_n_logits=10, desired_logit_prob=0.95)
            secs.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        timing[bs] = {"cold": secs[0], "warm": min(secs[1:]), "cpu_warm": min(cpu[1:])}
        print(
            f"circuit-tracer batch_size={bs}: {secs[0]:.2f} s cold, {min(secs[1:]):.2f} s warm "
            f"(CPU {min(cpu[1:]):.2f} s)",
            flush=True,
        )

    # index both graphs' nodes by key
    n = len(ours["tokens"])
    L = rm.cfg.n_layers
    af = g.active_features[g.selected_features].tolist()
    ct_keys = [("f", l, p, f) for l, p, f in af] + [("e", l, p) for l in range(L) for p in range(n)]
    ct_keys += [("t", p) for p in range(n)] + [("l", int(t.vocab_idx)) for t in g.logit_targets]
    our_keys = []
    lc = 0
    for k, l, p, f in zip(ours["node_kind"], ours["node_layer"], ours["node_pos"], ours["node_feature"]):
        if k == "feature":
            our_keys.append(("f", l, p, f))
        elif k == "error":
            our_keys.append(("e", l, p))
        elif k == "token":
            our_keys.append(("t", p))
        else:
            our_keys.append(("l", int(ours["target_ids"][lc])))
            lc += 1
    ci = {k: i for i, k in enumerate(ct_keys)}
    # circuit-tracer zeroes the error vectors at BOS too (its BOS MLP write has no node): its error nodes there
    # have zero edges, interp's carry that write, so they are not compared
    # a feature active in one graph only (its pre-activation within float rounding of the threshold) moves its
    # activation × W_dec between that graph's feature and its error node at (layer, pos): those error nodes differ
    # by construction and are not compared either
    odd = {(k[1], k[2]) for k in set(our_keys) ^ set(ct_keys) if k[0] == "f"}
    skip = lambda k: k[0] == "e" and (k[2] == 0 or (k[1], k[2]) in odd)  # noqa: E731
    shared = [k for k in our_keys if k in ci and not skip(k)]
    oi = {k: i for i, k in enumerate(our_keys)}
    A_ct, A_us = g.adjacency_matrix.double(), ours["adjacency"].double()
    s_ct = torch.tensor([ci[k] for k in shared])
    s_us = torch.tensor([oi[k] for k in shared])
    sub_ct, sub_us = A_ct[s_ct][:, s_ct], A_us[s_us][:, s_us]
    feat_rows = torch.tensor([k[0] == "f" for k in shared])
    logit_rows = torch.tensor([k[0] == "l" for k in shared])
    d = sub_us - sub_ct
    scale = sub_us.abs().max()
    feat_rel = float(d[feat_rows].abs().max() / scale)
    row_rel = (d.abs().amax(1) / sub_us.abs().amax(1).clamp_min(1e-30))[feat_rows]  # per target row
    ti, si = divmod(int(d[feat_rows].abs().argmax()), d.shape[1])
    worst = (shared[int(feat_rows.nonzero()[ti])], shared[si])
    dl = d[logit_rows]
    common = dl.mean(0, keepdim=True)
    logit_rel = float((dl - common).abs().max() / scale)
    only_us = [k for k in our_keys if k not in ci or skip(k)]
    only_ct = [k for k in ct_keys if k not in oi]
    n_shared_edges = int(((sub_us != 0) | (sub_ct != 0)).sum())
    same_logits = sorted(k[1] for k in our_keys if k[0] == "l") == sorted(int(t.vocab_idx) for t in g.logit_targets)
    print(f"circuit-tracer 0.5.0 (nnsight): {len(af)} features, {A_ct.shape[0]} nodes")
    print(
        f"shared nodes {len(shared)} (interp only: {len(only_us)}, all at BOS: "
        f"{all(len(k) > 2 and k[2] == 0 for k in only_us)}; circuit-tracer only: {len(only_ct)}); "
        f"same top logits: {same_logits}; shared nonzero edges {n_shared_edges}"
    )
    print(
        f"features' rows: max |Δ| / max |A| = {feat_rel:.2e} (largest at target {worst[0]} ← source {worst[1]}); "
        f"per row, max |Δ| / max |row|: median {float(row_rel.median()):.1e}, max {float(row_rel.max()):.1e}; "
        f"logit rows (common demeaning row removed): {logit_rel:.2e}; features in one graph only: {sorted(odd)}"
    )
    torch.save({"adjacency": g.adjacency_matrix, "keys": ct_keys}, work / "ct_graph.pt")

    # interp's export, against circuit-tracer's schema and its own create_graph_files on interp's adjacency
    from circuit_tracer.frontend.graph_models import Model
    from circuit_tracer.graph import Graph
    from circuit_tracer.attribution.targets import LogitTarget
    from circuit_tracer.utils.create_graph_files import create_graph_files

    exported = json.loads((work / "interp_graph.json").read_text())
    Model.model_validate(exported)
    nf = sum(k == "feature" for k in ours["node_kind"])
    feats = torch.tensor(
        [
            [l, p, f]
            for k, l, p, f in zip(ours["node_kind"], ours["node_layer"], ours["node_pos"], ours["node_feature"])
            if k == "feature"
        ]
    )
    lw = ours["output_weight"][-len(ours["target_ids"]) :].float()
    tok = rm.tokenizer
    twin = Graph(
        input_string=tok.decode(ours["tokens"]),
        input_tokens=tokens,
        active_features=feats,
        adjacency_matrix=ours["adjacency"].float(),
        cfg=rm.cfg,
        selected_features=torch.arange(nf),
        activation_values=ours["activation"][:nf].float(),
        logit_targets=[LogitTarget(tok.decode([i]), int(i)) for i in ours["target_ids"]],
        logit_probabilities=lw,
        scan="bench",
        vocab_size=rm.cfg.d_vocab,
    )
    with tempfile.TemporaryDirectory() as td:
        create_graph_files(twin, "ct", td, scan="bench")
        theirs = json.loads((Path(td) / "ct.json").read_text())
    ren = lambda nid: ("err_" + nid[2:]) if nid.startswith("0_") and nid.count("_") == 2 else nid  # noqa: E731
    # circuit-tracer's error ids collide with layer-0 feature ids: rename only its error nodes
    t_ids = {
        (ren(x["node_id"]) if x["feature_type"] == "mlp reconstruction error" else x["node_id"])
        for x in theirs["nodes"]
    }
    e_ids = {x["node_id"] for x in exported["nodes"]}
    t_links = {}
    err_of = {x["node_id"] for x in theirs["nodes"] if x["feature_type"] == "mlp reconstruction error"}
    collisions = len(theirs["nodes"]) - len({x["node_id"] for x in theirs["nodes"]})
    for e in theirs["links"]:
        t_links[(e["source"], e["target"])] = e["weight"]
    e_links = {(e["source"], e["target"]): e["weight"] for e in exported["links"]}
    same_nodes = t_ids == e_ids
    same_links = len(t_links) == len(e_links)
    rel_w = 0.0
    if not collisions:
        mapped = {(ren(s) if s in err_of else s, ren(t) if t in err_of else t): w for (s, t), w in t_links.items()}
        same_links = mapped.keys() == e_links.keys()
        if same_links:
            rel_w = max(abs(mapped[k] - e_links[k]) / max(abs(mapped[k]), 1e-30) for k in mapped)
    print(
        f"export: validates against circuit-tracer's Model; create_graph_files on interp's adjacency: "
        f"{len(theirs['nodes'])} nodes ({collisions} duplicate ids), {len(theirs['links'])} links; interp's file "
        f"{len(exported['nodes'])} nodes, {len(exported['links'])} links; same nodes {same_nodes}, same links "
        f"{same_links}, max relative weight difference {rel_w:.1e}"
    )
    (work / "comparison.json").write_text(
        json.dumps(
            {
                "ct_timing": timing,
                "ct_features": len(af),
                "shared_nodes": len(shared),
                "interp_only": len(only_us),
                "ct_only": len(only_ct),
                "same_top_logits": same_logits,
                "feature_rows_rel": feat_rel,
                "logit_rows_rel": logit_rel,
                "row_rel_median": float(row_rel.median()),
                "row_rel_max": float(row_rel.max()),
                "shared_nonzero_edges": n_shared_edges,
                "export_valid": True,
                "export_same_nodes": same_nodes,
                "export_same_links": same_links,
                "export_weight_rel": rel_w,
                "ct_duplicate_ids": collisions,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
