"""Every metric against independent implementations, on data with exact duplicates and ties.

Oracles: a brute-force stable argsort (the reference scripts' tie order), torchmetrics,
pytrec_eval, clip_benchmark's retrieval recall, mteb's BioVITA scorer and INQUIRE's AP
definition (re-implemented from PROTOCOLS.md with sklearn's average_precision_score).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import pytrec_eval
import torch
from clip_benchmark.metrics.zeroshot_retrieval import recall_at_k as clip_recall_at_k
from mteb.tasks.reranking.eng.biovita import _task_specific_scores as mteb_biovita_scores
from sklearn.metrics import average_precision_score, balanced_accuracy_score
from torchmetrics.functional.retrieval import (
    retrieval_hit_rate,
    retrieval_normalized_dcg,
    retrieval_recall,
    retrieval_reciprocal_rank,
)

from vlbench.metrics.rows import outcomes_table
from vlbench.protocols import PROTOCOLS
from vlbench.rank.protocol_ranks import Side, rank_protocol

N_QUERIES, N_GALLERY = 30, 45


def tied_vectors(rng: np.random.Generator, n: int, d: int = 4) -> np.ndarray:
    vectors = rng.integers(-1, 2, size=(n, d)).astype(np.float32)
    vectors[: n // 4] = vectors[n // 4 : 2 * (n // 4)]
    return vectors


@pytest.fixture(scope="module")
def retrieval_case():
    """Multi-positive judgements with graded relevance over tie-heavy vectors."""
    rng = np.random.default_rng(11)
    queries, gallery = tied_vectors(rng, N_QUERIES), tied_vectors(rng, N_GALLERY)
    qids = np.array([f"q{i}" for i in range(N_QUERIES)], dtype=object)
    gids = np.array([f"g{i}" for i in range(N_GALLERY)], dtype=object)
    rows = []
    for q in range(N_QUERIES):
        for item in rng.choice(N_GALLERY, size=rng.integers(1, 6), replace=False):
            rows.append((qids[q], gids[item], int(rng.integers(1, 4))))
    judgements = pl.DataFrame(rows, schema=["query_id", "item_id", "relevance"], orient="row")
    ranks = rank_protocol(
        PROTOCOLS["multi_positive"],
        Side(queries, qids),
        Side(gallery, gids),
        judgements,
        tie_policy="index",
    )
    # Independent strict order: position in a full stable argsort of each score row.
    scores = (queries @ gallery.T).astype(np.float64)
    order = np.argsort(-scores, axis=1, kind="stable")
    position = np.argsort(order, axis=1)  # 0-based rank of each gallery item per query
    strict = (N_GALLERY - position).astype(np.float64)  # tie-free scores with that order
    grades = np.zeros((N_QUERIES, N_GALLERY))
    for qid, gid, grade in rows:
        grades[int(qid[1:]), int(gid[1:])] = grade
    return SimpleNamespace(ranks=ranks, strict=strict, grades=grades, qids=qids, gids=gids)


def outcome(ranks: pl.DataFrame, protocol: str, metric: str, k: int | None, ks=(1, 5, 10)):
    table = outcomes_table(ranks, PROTOCOLS[protocol], list(ks))
    picked = table.filter(
        (pl.col("metric") == metric) & (pl.col("k").is_null() if k is None else pl.col("k") == k)
    )
    return dict(zip(picked["query_id"], picked["outcome"].to_numpy(), strict=True))


def per_query(case, fn) -> dict[str, float]:
    return {case.qids[q]: fn(q) for q in range(N_QUERIES)}


@pytest.mark.parametrize("k", [1, 5, 10])
def test_hit_rate_and_true_recall_match_torchmetrics(retrieval_case, k: int) -> None:
    case = retrieval_case
    preds, target = torch.tensor(case.strict), torch.tensor(case.grades > 0)
    hits = per_query(case, lambda q: 100 * float(retrieval_hit_rate(preds[q], target[q], top_k=k)))
    recall = per_query(case, lambda q: 100 * float(retrieval_recall(preds[q], target[q], top_k=k)))
    ours_hits = outcome(case.ranks, "multi_positive", "recall", k)
    ours_recall = outcome(case.ranks, "multi_positive", "true_recall", k)
    assert ours_hits == pytest.approx(hits)
    assert ours_recall == pytest.approx(recall)


@pytest.mark.parametrize("k", [1, 5, 10])
def test_hit_rate_matches_clip_benchmark(retrieval_case, k: int) -> None:
    case = retrieval_case
    recall = clip_recall_at_k(torch.tensor(case.strict), torch.tensor(case.grades > 0), k)
    expected = dict(zip(case.qids, (100 * (recall > 0).double()).numpy(), strict=True))
    assert outcome(case.ranks, "multi_positive", "recall", k) == pytest.approx(expected)


def test_mrr_and_ndcg_match_torchmetrics(retrieval_case) -> None:
    case = retrieval_case
    preds, grades = torch.tensor(case.strict), torch.tensor(case.grades)
    mrr = per_query(case, lambda q: 100 * float(retrieval_reciprocal_rank(preds[q], grades[q] > 0)))
    ndcg = per_query(
        case, lambda q: 100 * float(retrieval_normalized_dcg(preds[q], grades[q], top_k=10))
    )
    assert outcome(case.ranks, "multi_positive", "mrr", None) == pytest.approx(mrr)
    assert outcome(case.ranks, "multi_positive", "ndcg", 10) == pytest.approx(ndcg)


def test_ranking_metrics_match_pytrec_eval(retrieval_case) -> None:
    case = retrieval_case
    qrels = {
        case.qids[q]: {case.gids[g]: int(case.grades[q, g]) for g in np.flatnonzero(case.grades[q])}
        for q in range(N_QUERIES)
    }
    run = {
        case.qids[q]: {case.gids[g]: float(case.strict[q, g]) for g in range(N_GALLERY)}
        for q in range(N_QUERIES)
    }
    measures = {"recip_rank", "ndcg_cut.10", "recall.5", "success.5", "map"}
    scores = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    for ours, theirs, k, protocol in [
        ("mrr", "recip_rank", None, "multi_positive"),
        ("ndcg", "ndcg_cut_10", 10, "multi_positive"),
        ("true_recall", "recall_5", 5, "multi_positive"),
        ("recall", "success_5", 5, "multi_positive"),
    ]:
        expected = {q: 100 * scores[q][theirs] for q in scores}
        assert outcome(case.ranks, protocol, ours, k) == pytest.approx(expected), ours
    # AP over the whole list (k = all) is trec_eval's map when every relevant item is ranked.
    rerank = case.ranks
    expected = {q: 100 * scores[q]["map"] for q in scores}
    assert outcome(rerank, "rerank", "average_precision", None) == pytest.approx(expected)


def inquire_ap_at_k(labels_in_rank_order: np.ndarray, k: int) -> float:
    """INQUIRE's AP@k: sklearn AP over the ranked top k, times (#relevant in top k) /
    min(#relevant, k); 0 when no relevant item is in the top k."""
    top = labels_in_rank_order[:k]
    if not top.any():
        return 0.0
    ap = average_precision_score(top, -np.arange(len(top), dtype=np.float64))
    return float(ap * top.sum() / min(labels_in_rank_order.sum(), k))


@pytest.mark.parametrize("k", [3, 10, None])
def test_average_precision_matches_inquire_definition(retrieval_case, k: int | None) -> None:
    case = retrieval_case
    expected = {}
    for q in range(N_QUERIES):
        labels = (case.grades[q] > 0)[np.argsort(-case.strict[q], kind="stable")]
        expected[case.qids[q]] = 100 * inquire_ap_at_k(labels.astype(int), k or N_GALLERY)
    ours = outcome(case.ranks, "rerank", "average_precision", k, ks=[3, 10])
    assert ours == pytest.approx(expected)


def test_candidate_restricted_rerank_matches_pytrec_eval() -> None:
    """Candidate lists: ranks and every metric only see the query's own candidates."""
    rng = np.random.default_rng(5)
    queries, gallery = tied_vectors(rng, 12), tied_vectors(rng, 60)
    qids = np.array([f"q{i}" for i in range(12)], dtype=object)
    gids = np.array([f"g{i}" for i in range(60)], dtype=object)
    candidates, rows, qrels, run = [], [], {}, {}
    for q in range(12):
        cands = rng.choice(60, size=15, replace=False)
        candidates.append((qids[q], [gids[c] for c in cands], None))
        scores = gallery[cands] @ queries[q]
        order = np.argsort(-scores, kind="stable")
        run[qids[q]] = {gids[cands[o]]: float(15 - at) for at, o in enumerate(order)}
        judged = rng.choice(cands, size=4, replace=False)
        qrels[qids[q]] = {}
        for j, g in enumerate(judged):
            grade = int(j % 3)  # 0 = judged not relevant
            rows.append((qids[q], gids[g], grade))
            qrels[qids[q]][gids[g]] = grade
    ranks = rank_protocol(
        PROTOCOLS["rerank"],
        Side(queries, qids),
        Side(gallery, gids),
        pl.DataFrame(rows, schema=["query_id", "item_id", "relevance"], orient="row"),
        pl.DataFrame(
            candidates, schema=["query_id", "candidate_ids", "candidate_groups"], orient="row"
        ),
    )
    assert ranks["gallery_size"].unique().to_list() == [15]
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"map", "ndcg_cut.10", "recip_rank"}).evaluate(
        run
    )
    for ours, theirs, k in [
        ("average_precision", "map", None),
        ("ndcg", "ndcg_cut_10", 10),
        ("mrr", "recip_rank", None),
    ]:
        expected = {q: 100 * scores[q][theirs] for q in scores}
        assert outcome(ranks, "rerank", ours, k, ks=[10]) == pytest.approx(expected), ours


def test_taxon_accuracy_matches_mteb_biovita_scorer() -> None:
    """BioVITA: max-pool over every candidate entry, candidate-order tie-break (mteb's scorer)."""
    rng = np.random.default_rng(2)
    taxa = [f"taxon{i}" for i in range(12)]
    corpus_taxon = [taxa[i % 12] for i in range(30)]  # several entries per taxon
    corpus_ids = [f"c{i}" for i in range(30)]
    gallery = tied_vectors(rng, 30, 3)
    queries = tied_vectors(rng, 40, 3)
    qids = [f"q{i}" for i in range(40)]
    truth, orders, results = [], [], {}
    for q in range(40):
        order = rng.permutation(taxa)[:8].tolist()
        truth.append(order[int(rng.integers(8))])
        orders.append(order)
        scores = gallery @ queries[q]
        results[qids[q]] = {
            corpus_ids[c]: float(scores[c]) for c in range(30) if corpus_taxon[c] in order
        }
    candidates = pl.DataFrame(
        {
            "query_id": qids,
            "candidate_ids": [list(results[q]) for q in qids],
            "candidate_groups": orders,
        }
    )
    ranks = rank_protocol(
        PROTOCOLS["taxon_candidates"],
        Side(queries, np.array(qids, dtype=object), np.array(truth, dtype=object)),
        Side(gallery, np.array(corpus_ids, dtype=object), np.array(corpus_taxon, dtype=object)),
        None,
        candidates,
    )
    task = SimpleNamespace(
        dataset={
            "s": {
                "test": {
                    "queries": {"id": qids, "candidate_taxa": orders, "correct_taxon": truth},
                    "corpus": {"id": corpus_ids, "taxon": corpus_taxon},
                }
            }
        }
    )
    expected = mteb_biovita_scores(task, {}, {}, results, "test", "s")
    for k in (1, 5, 10):
        ours = outcome(ranks, "taxon_candidates", "taxon_top_k_accuracy", k)
        assert np.mean(list(ours.values())) == pytest.approx(
            100 * expected[f"taxon_top_{k}_accuracy"]
        )


def test_zeroshot_accuracies_match_argsort_and_sklearn() -> None:
    rng = np.random.default_rng(4)
    classes = [f"class{i}" for i in range(7)]
    prompts = np.hstack([tied_vectors(rng, 21, 3), np.ones((21, 1), np.float32)])  # no zero rows
    prompt_class = np.array([classes[i % 7] for i in range(21)], dtype=object)
    images = np.hstack([tied_vectors(rng, 50, 3), np.ones((50, 1), np.float32)])
    truth = np.array([classes[i] for i in rng.integers(0, 7, size=50)], dtype=object)
    ranks = rank_protocol(
        PROTOCOLS["zeroshot"],
        Side(images, np.array([f"i{i}" for i in range(50)], dtype=object), truth),
        Side(prompts, np.array([f"p{i}" for i in range(21)], dtype=object), prompt_class),
        None,
    )
    normalised = prompts / np.linalg.norm(prompts, axis=1, keepdims=True)
    classifier = np.stack([normalised[prompt_class == c].mean(axis=0) for c in classes])
    classifier /= np.linalg.norm(classifier, axis=1, keepdims=True)
    logits = images.astype(np.float64) @ classifier.T
    order = np.argsort(-logits, axis=1, kind="stable")
    truth_index = np.array([classes.index(c) for c in truth])
    top1 = order[:, 0] == truth_index
    top5 = (order[:, :5] == truth_index[:, None]).any(axis=1)
    balanced = balanced_accuracy_score(truth_index, order[:, 0])

    def mean(metric: str, k: int) -> float:
        return float(np.mean(list(outcome(ranks, "zeroshot", metric, k).values())))

    assert mean("zeroshot_top1_accuracy", 1) == pytest.approx(100 * top1.mean())
    assert mean("zeroshot_top5_accuracy", 5) == pytest.approx(100 * top5.mean())
    assert mean("balanced_accuracy", 1) == pytest.approx(100 * balanced)
