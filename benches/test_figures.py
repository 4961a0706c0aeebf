"""The check of benches/figures.py, on BENCHMARKS.md and on broken copies of it
(scripts/check runs this: `python3 -m unittest discover -s benches -p test_figures.py`)."""
import json
import os
import re
import shutil
import tempfile
import unittest

import figures


class BrokenCopies(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.doc = os.path.join(self.dir, "BENCHMARKS.md")
        self.results = os.path.join(self.dir, "bench")
        shutil.copy(figures.DOC, self.doc)
        shutil.copytree(figures.RESULTS, self.results)
        with open(self.doc) as fh:
            self.text = fh.read()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def problems(self, text):
        with open(self.doc, "w") as fh:
            fh.write(text)
        return figures.check(self.doc, self.results)

    def first_region(self):
        """(name, its header line) of the first region of the document."""
        name = re.search(r"^<!-- table:([a-z0-9-]+) -->$", self.text, re.M)
        head = self.text[name.end():].lstrip("\n").splitlines()[0]
        return name[1], head

    def test_the_repositorys_document_passes(self):
        self.assertEqual(figures.check(figures.DOC, figures.RESULTS), [])

    def test_rendering_again_changes_nothing(self):
        for path in sorted(os.listdir(self.results)):
            if path.endswith(".json"):
                with open(os.path.join(self.results, path)) as fh:
                    rec = json.load(fh)
                figures.replace_region(self.doc, rec["name"], figures.render_record(rec))
        with open(self.doc) as fh:
            self.assertEqual(fh.read(), self.text)

    def test_a_table_outside_a_region(self):
        text = self.text.replace("## Running\n", "## Running\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", 1)
        self.assertTrue(any("a table outside a rendered region" in p for p in self.problems(text)))

    def test_a_header_without_a_commit(self):
        name, head = self.first_region()
        broken = re.sub(r"^> commit [0-9a-f]+", "> commit ?", head)
        problems = self.problems(self.text.replace(head, broken, 1))
        self.assertTrue(any(f"table {name}: its header lacks a commit and a command" in p for p in problems))

    def test_a_header_without_a_command(self):
        name, head = self.first_region()
        broken = re.sub(r" · command: `[^`]+`", "", head)
        problems = self.problems(self.text.replace(head, broken, 1))
        self.assertTrue(any(f"table {name}: its header lacks a commit and a command" in p for p in problems))

    def test_a_figure_typed_by_hand(self):
        name, head = self.first_region()
        start = self.text.index(head)
        row = next(line for line in self.text[start:].splitlines() if line.startswith("| ") and "---" not in line
                   and re.search(r"\d\.\d", line))
        edited = re.sub(r"(\d)\.(\d)", lambda m: f"{(int(m[1]) + 1) % 10}.{m[2]}", row, count=1)
        problems = self.problems(self.text.replace(row, edited, 1))
        self.assertTrue(any(f"table {name} is not what" in p for p in problems), problems)

    def test_a_region_that_never_closes(self):
        name, _ = self.first_region()
        problems = self.problems(self.text.replace(f"<!-- /table:{name} -->", "", 1))
        self.assertTrue(any("never closes" in p or "opens inside" in p for p in problems), problems)

    def test_a_region_without_its_results_file(self):
        name, _ = self.first_region()
        os.remove(os.path.join(self.results, f"{name}.json"))
        self.assertTrue(any("no results file" in p for p in self.problems(self.text)))


if __name__ == "__main__":
    unittest.main()


class SwarmRounds(unittest.TestCase):
    """A swarm row run several times: the median run's figures, the range
    of all, and the target judged on the median."""

    def row(self, shares):
        run = {"workload": "independent", "tasks": 2000, "wall_s": 0.5, "tasks_per_s": 4000,
               "scheduler_on_cpu_s": 0.4, "swarm_on_cpu_s": 0.4 * sorted(shares)[(len(shares) - 1) // 2],
               "shares": shares}
        return {"size": 2000, "task_ms": 10, "repeat": len(shares),
                "scales": [{"workers": 1000, "decision_latency_ms": {"p50": 1, "p99": 2},
                            "swarm_rss_idle_per_worker": 40 * 1024, "rows": [run]}]}

    def test_the_range_and_the_median_verdict(self):
        out = figures.render_swarm(self.row([0.12, 0.09, 0.095]))
        self.assertIn("ran 3 times at each size", out)
        self.assertIn("| 10 % (9.0–12.0 %) (target ≤ 10 %: met) |", out)
        out = figures.render_swarm(self.row([0.12, 0.09, 0.11]))
        self.assertIn("| 11 % (9.0–12.0 %) (target ≤ 10 %: **missed**) |", out)


class SwarmFidelity(unittest.TestCase):
    """The fidelity table: the wall time against the target, and where a
    task's time goes, each part's median over rounds with their range."""

    def rounds(self, walls, between):
        parts = {"run": 10.0, "report": 2.0, "dispatch": 40.0}
        return [{"tasks": 4095, "wall_s": w, "scheduler_messages": {"in:task-finished": 4095},
                 "turnaround": {"tasks": 4095, "between": {"p50_ms": b, "mean_ms": b},
                                **{k: {"p50_ms": v, "mean_ms": v} for k, v in parts.items()}}}
                for w, b in zip(walls, between)]

    def test_the_parts_of_a_task_and_the_verdict(self):
        d = {"size": 2048, "task_ms": 10,
             "rounds": {"python": self.rounds([7.0, 8.0, 7.5], [2.0, 3.0, 1.0]),
                        "swarm": self.rounds([6.0, 6.5, 6.4], [1.1, 1.1, 1.2])}}
        out = figures.render_swarm_fidelity(d)
        self.assertIn("Python workers 7.50 (7.00–8.00) s, simulated 6.40 (6.00–6.50) s: -14.7 % "
                      "(target within ±15 %: met)", out)
        self.assertIn("| between | 2.00 (1.00–3.00) | 1.10 (1.10–1.20) |", out)
        self.assertIn("| run | 10.00 (10.00–10.00) | 10.00 (10.00–10.00) |", out)
        self.assertIn("| `in:task-finished` | 4095 | 4095 | +0.0 % | met |", out)

    def test_a_count_that_differs_over_rounds_shows_its_range(self):
        python = self.rounds([7.0, 8.0, 7.5], [2.0, 3.0, 1.0])
        swarm = self.rounds([7.0, 7.1, 7.2], [1.1, 1.1, 1.2])
        for r, n in zip(python + swarm, [43, 51, 58, 50, 57, 60]):
            r["scheduler_messages"]["out:remove-replicas"] = n
        out = figures.render_swarm_fidelity({"rounds": {"python": python, "swarm": swarm}})
        self.assertIn("| `out:remove-replicas` | 51 (43–58) | 57 (50–60) | +11.8 % | **missed** |", out)

    def test_each_setup_of_the_fidelity_run_renders_as_one(self):
        with open(os.path.join(figures.RESULTS, "swarm-fidelity.json")) as fh:
            env = json.load(fh)["environment"]
        rec = {"name": "swarm-fidelity-40ms", "command": "scripts/swarm-bench --fidelity --fidelity-task-ms 40",
               "environment": env,
               "data": {"task_ms": 40, "workers": 8,
                        "rounds": {"python": self.rounds([22.0], [0.8]), "swarm": self.rounds([22.1], [1.1])}}}
        out = figures.render_record(rec)
        self.assertIn("A tree reduction of 4,095 tasks of 40 ms on 8 workers of 1 thread", out)
