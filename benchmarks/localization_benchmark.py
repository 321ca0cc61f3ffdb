"""Placeholders, markup and terms through translation: how often each system keeps them, and what it costs.

    python benchmarks/localization_benchmark.py --system plain=runs/l10n/plain --system masked=runs/l10n/masked \\
        --test test=runs/l10n/plain/test.tsv --glossary benchmarks/glossary_en_fr.tsv

Each system is a model directory, translated through the Python API as ``python -m gnmt_tf.evaluate`` does
(its config decides whether placeholders are masked: ``localization.placeholders``), each in a fresh
worker with ``--threads`` TensorFlow threads, its best checkpoint, beam search with its config's options.
``NAME=MODEL_DIR@unconstrained`` masks and restores as the model's config says but lets the beam search
write the slot tokens as it likes (restoring drops a slot the source has not): what the constrained
search adds.
Per test set (a TSV of pairs the systems chose nothing on: a model directory's test split, or the held-out
catalogs of ``benchmarks/heldout_catalogs.py``) it reports:

* **format placeholders kept exactly**: of the sources holding a format placeholder (printf, Python's
  %-mapping, braces, ``${}``), the share whose translation holds each of them exactly as often and no
  other (``gnmt_tf.localization.placeholders.check``, order aside); the references' own share beside it;
* **tags and entities kept**: the same for markup and character entities; and of the sources whose tags
  are well formed (each closing tag closes the last open one), the share of translations whose tags are;
* **BLEU** (sacrebleu) on all pairs, on the pairs whose source holds a placeholder and on the others;
* **words/s**: translated words per second over the whole set at batch 32 (the second pass: the first
  pays the tracing);
* with ``--glossary`` (``source term<TAB>target term`` lines) and a system that masks: the **term hit
  rate** (of the pairs whose source holds a term as a word, the share whose translation holds its target
  term) and BLEU of the pairs without a term, both with the glossary given per request and without.

Results: one run appended to ``benchmarks/results/localization.json`` (``harness.write_report``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from harness import answer_job, run_job_in_worker, write_report  # noqa: E402

FORMAT_CLASSES = ("printf", "python_mapping", "brace", "shell")
MARKUP_CLASSES = ("markup", "entity")
OUTPUT = os.path.join(HERE, "results", "localization.json")

Pair = Tuple[str, str]


# ================================================================================== the measures (pure Python)
def kept(source: str, translation: str, classes: Sequence[str]) -> Optional[bool]:
    """Whether ``translation`` holds the placeholders of ``classes`` that ``source`` holds, each as often and no
    other; None when the source holds none of them."""
    from gnmt_tf.localization.placeholders import check, find_placeholders

    if not any(found.kind in classes for found in find_placeholders(source)):
        return None
    return not any(d.missing or d.extra for d in check(source, translation).differences if d.kind in classes)


_TAG = re.compile(r"<(/?)([A-Za-z][0-9A-Za-z_:.-]*)[^<>]*?(/?)>")
_VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"}


def well_formed(text: str) -> Optional[bool]:
    """Whether the tags of ``text`` nest (each closing tag closes the innermost open one, every one is closed;
    void and self-closing tags stand alone); None without tags."""
    from gnmt_tf.localization.placeholders import find_placeholders

    tags = [found.text for found in find_placeholders(text) if found.kind == "markup" and not found.text.startswith("<!--")]
    if not tags:
        return None
    open_tags: List[str] = []
    for tag in tags:
        match = _TAG.fullmatch(tag)
        if match is None:
            continue
        closing, name, self_closing = match.group(1), match.group(2).lower(), match.group(3)
        if self_closing or name in _VOID:
            continue
        if not closing:
            open_tags.append(name)
        elif not open_tags or open_tags.pop() != name:
            return False
    return not open_tags


def share(values: Sequence[Optional[bool]]) -> Dict:
    """``{"of": n, "kept": k, "percent": 100 k / n}`` over the values that are not None."""
    counted = [value for value in values if value is not None]
    return {"of": len(counted), "kept": sum(counted),
            "percent": round(100.0 * sum(counted) / len(counted), 2) if counted else None}


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Optional[float]:
    from gnmt_tf.metrics.bleu import corpus_bleu

    return round(corpus_bleu(list(hypotheses), list(references)).score, 2) if hypotheses else None


def placeholder_measures(pairs: Sequence[Pair], hypotheses: Sequence[str]) -> Dict:
    """Everything but speed and terms, for one system's ``hypotheses`` of ``pairs``."""
    from gnmt_tf.localization.placeholders import find_placeholders

    sources = [source for source, _ in pairs]
    references = [" ".join(target.split()) for _, target in pairs]
    holds = [bool(find_placeholders(source)) for source in sources]
    return {
        "format_kept": share([kept(s, h, FORMAT_CLASSES) for s, h in zip(sources, hypotheses)]),
        "format_kept_by_references": share([kept(s, r, FORMAT_CLASSES) for s, r in zip(sources, references)]),
        "markup_kept": share([kept(s, h, MARKUP_CLASSES) for s, h in zip(sources, hypotheses)]),
        "markup_kept_by_references": share([kept(s, r, MARKUP_CLASSES) for s, r in zip(sources, references)]),
        # Of the translations of sources whose own tags are well formed (a source may hold a closing tag
        # whose opening one is no markup, "<label>x</label>", or a fragment).
        "tags_well_formed": share([well_formed(h) if well_formed(s) else None for s, h in zip(sources, hypotheses)]),
        "tags_well_formed_in_references": share([well_formed(r) if well_formed(s) else None
                                                 for s, r in zip(sources, references)]),
        "bleu": bleu(hypotheses, references),
        "bleu_with_placeholders": bleu([h for h, x in zip(hypotheses, holds) if x],
                                       [r for r, x in zip(references, holds) if x]),
        "bleu_without_placeholders": bleu([h for h, x in zip(hypotheses, holds) if not x],
                                          [r for r, x in zip(references, holds) if not x]),
        "pairs": len(pairs), "pairs_with_placeholders": sum(holds),
    }


def terms_in(source: str, glossary: Sequence[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The glossary entries whose source term the translator masks in ``source`` (as a word, not inside a
    placeholder: ``gnmt_tf.localization.placeholders.mask``)."""
    from gnmt_tf.localization.placeholders import TERM, mask

    return [entry for entry in glossary
            if any(p.kind == TERM for p in mask(source, glossary=[entry]).placeholders)]


# ================================================================================== the worker
def worker_translate(job: Dict, threads: int) -> Dict:
    """One system: each test set translated twice (the second pass timed), with and without the glossary."""
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(threads)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from gnmt_tf.inference.evaluation import load_translator
    from gnmt_tf.inference.results import texts

    translator, config, checkpoint = load_translator(job["model_dir"], batch_size=job["batch"])
    if job["unconstrained"]:
        translator = unconstrained(translator)
    out = {"checkpoint": os.path.relpath(checkpoint, job["model_dir"]),
           "placeholders_masked": bool(config.localization.placeholders), "sets": {}}
    for name, path in job["tests"].items():
        pairs = read_pairs(path, job["max_pairs"])
        sources = [source for source, _ in pairs]
        translator.translate(sources)  # the first pass pays the tracing of every shape
        started = time.perf_counter()
        hypotheses = texts(translator.translate(sources))
        seconds = time.perf_counter() - started
        result = {"hypotheses": hypotheses, "seconds": round(seconds, 1),
                  "words_per_second": round(sum(len(h.split()) for h in hypotheses) / seconds, 1)}
        if job["glossary"] and config.localization.placeholders:
            glossary = [tuple(entry) for entry in job["glossary"]]
            result["hypotheses_with_glossary"] = texts(translator.translate(sources, glossary=glossary))
        out["sets"][name] = result
        print(f"  {job['name']} on {name}: {result['words_per_second']} words/s", file=sys.stderr, flush=True)
    return out


def unconstrained(translator):
    """``translator`` with its masking, but a search free to write any slot token any number of times."""
    from gnmt_tf.decoding.constraints import UNCONSTRAINED
    from gnmt_tf.inference.translator import Translator
    from gnmt_tf.localization.in_graph import PlaceholderMasking

    class UnconstrainedMasking(PlaceholderMasking):
        def constraint(self, source_ids):
            return UNCONSTRAINED

    masking = translator.module.text
    text = UnconstrainedMasking(masking.slot_token_ids, masking.patterns)
    return Translator(translator.model, translator.tokenizer, translator.decoding, batch_size=translator.batch_size,
                      precompute_target_inputs=True, text=text)


def read_pairs(path: str, max_pairs: Optional[int] = None) -> List[Pair]:
    """The pairs of a test TSV; with ``max_pairs`` a seeded sample of that many, in file order."""
    from gnmt_tf.cli.evaluate import read_test_set
    from gnmt_tf.cli.text_files import ENCODING_ERRORS

    pairs = read_test_set(path, ENCODING_ERRORS["strict"])
    if max_pairs is None or len(pairs) <= max_pairs:
        return pairs
    return [pairs[i] for i in sorted(random.Random(0).sample(range(len(pairs)), max_pairs))]


WORKERS = {"translate": worker_translate}


# ================================================================================== the sitting
def term_measures(pairs: Sequence[Pair], plain: Sequence[str], with_glossary: Sequence[str],
                  glossary: Sequence[Tuple[str, str]]) -> Dict:
    """Term hit rates with and without the glossary, and BLEU of the pairs without a term both ways."""
    holding = [terms_in(source, glossary) for source, _ in pairs]

    def hits(hypotheses):
        return share([all(target in h for _, target in terms) if terms else None
                      for h, terms in zip(hypotheses, holding)])

    references = [" ".join(target.split()) for _, target in pairs]
    def subset_bleu(hypotheses, with_terms: bool):
        rows = [i for i, terms in enumerate(holding) if bool(terms) == with_terms]
        return bleu([hypotheses[i] for i in rows], [references[i] for i in rows])

    return {"term_hits_without_glossary": hits(plain), "term_hits_with_glossary": hits(with_glossary),
            "bleu_without_terms": subset_bleu(plain, False),
            "bleu_without_terms_with_glossary": subset_bleu(with_glossary, False),
            "bleu_with_terms": subset_bleu(plain, True), "bleu_with_terms_with_glossary": subset_bleu(with_glossary, True),
            "bleu_with_glossary": bleu(with_glossary, references)}


def measure(args) -> Dict:
    tests = dict(parse_named(text, "--test") for text in args.test)
    from gnmt_tf.localization.glossary import read_glossary

    glossary = read_glossary(args.glossary) if args.glossary else []
    systems = {}
    for name, spec in (parse_named(text, "--system") for text in args.system):
        model_dir, _, variant = spec.partition("@")
        job = {"task": "translate", "name": name, "model_dir": os.path.abspath(model_dir), "batch": args.batch,
               "tests": {k: os.path.abspath(v) for k, v in tests.items()}, "glossary": glossary,
               "unconstrained": variant == "unconstrained", "max_pairs": args.max_pairs}
        answer, info = run_job_in_worker(__file__, job, args.threads, timeout=args.timeout_minutes * 60)
        if "error" in answer:
            systems[name] = {"model_dir": model_dir, "error": answer["error"]}
            continue
        system = {"model_dir": model_dir, "variant": variant or None, "checkpoint": answer["checkpoint"],
                  "threads": args.threads,
                  "placeholders_masked": answer["placeholders_masked"], "sets": {}, "worker": info}
        for set_name, result in answer["sets"].items():
            pairs = read_pairs(tests[set_name], args.max_pairs)
            row = placeholder_measures(pairs, result["hypotheses"])
            row.update(words_per_second=result["words_per_second"], seconds=result["seconds"])
            if "hypotheses_with_glossary" in result:
                row.update(term_measures(pairs, result["hypotheses"], result["hypotheses_with_glossary"], glossary))
            system["sets"][set_name] = row
            write_hypotheses(args.hypotheses_dir, name, set_name, result)
        systems[name] = system
    return {"tests": tests, "max_pairs": args.max_pairs, "glossary": args.glossary, "batch": args.batch,
            "systems": systems}


def write_hypotheses(directory: Optional[str], system: str, test: str, result: Dict) -> None:
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    for key in ("hypotheses", "hypotheses_with_glossary"):
        if key in result:
            with open(os.path.join(directory, f"{system}.{test}.{key}.txt"), "w", encoding="utf-8") as handle:
                handle.writelines(line + "\n" for line in result[key])


def parse_named(text: str, flag: str) -> Tuple[str, str]:
    name, equals, path = text.partition("=")
    if not equals or not name or not path:
        raise SystemExit(f"{flag} expects NAME=PATH, got {text!r}")
    if not os.path.exists(path.partition("@")[0]):
        raise SystemExit(f"{flag} {text}: {path.partition('@')[0]} does not exist")
    return name, path


def markdown(report: Dict) -> str:
    lines = ["| system | set | format kept % (refs) | markup kept % (refs) | tags well formed % | BLEU | "
             "BLEU w/ ph. | BLEU w/o ph. | words/s |", "|---|---|---|---|---|---|---|---|---|"]
    for name, system in report["systems"].items():
        for set_name, r in system.get("sets", {}).items():
            lines.append(
                f"| {name} | {set_name} | {r['format_kept']['percent']} of {r['format_kept']['of']} "
                f"({r['format_kept_by_references']['percent']}) | {r['markup_kept']['percent']} of "
                f"{r['markup_kept']['of']} ({r['markup_kept_by_references']['percent']}) | "
                f"{r['tags_well_formed']['percent']} | {r['bleu']} | {r['bleu_with_placeholders']} | "
                f"{r['bleu_without_placeholders']} | {r['words_per_second']} |")
    return "\n".join(lines)


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", action="append", default=[], metavar="NAME=MODEL_DIR")
    parser.add_argument("--test", action="append", default=[], metavar="NAME=TSV")
    parser.add_argument("--glossary", default=None, metavar="TSV", help="source term<TAB>target term lines")
    parser.add_argument("--max-pairs", type=int, default=None,
                        help="score a seeded sample of this many pairs of a larger test set (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--timeout-minutes", type=float, default=60)
    parser.add_argument("--hypotheses-dir", default=None, help="write every system's translations here")
    parser.add_argument("--output", default=OUTPUT)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.worker:
        return answer_job(args.job, args.threads, WORKERS)
    if not args.system or not args.test:
        parser.error("give at least one --system NAME=MODEL_DIR and one --test NAME=TSV")
    report = measure(args)
    write_report(args.output, report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
