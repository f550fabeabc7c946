"""The credit study's setups: per env, its demonstrations, SFT amount and RL budget.

``SETUPS`` is what ``benchmarks/credit_study.py`` runs (``--envs`` picks among them,
``--set`` changes their fields, ``--scale`` applies :func:`scaled`); ``SUPERSEDED`` names
warm starts the study moved away from, whose records the page still lists.
"""

from __future__ import annotations

from dataclasses import replace

from agentgym.trainers.study.units import Setup

SETUPS = {
    # one epoch of 100 solver episodes (at lr 5e-5, then 1e-4, see SUPERSEDED) taught the
    # tool-call format but not the move: the model gave its own demonstrations' moves 31%
    # (chance 25%) and sampled 8% of tuning seeds, below random play's 17.5%; so more
    # updates on the same episodes: three epochs at half the batch (six times the steps).
    # The ``--scale`` warm start (400 episodes, the same lr and batch, 738 steps) shows the
    # move is learnable: its loss over a completion stayed near ln 4 (a uniform guess among
    # four moves) for about 120 steps, then fell, to a fit of 76% and 41% sampled success.
    # Success is measured sampled at T=1 as on FrozenLake, the policy RL trains; held-out
    # evaluation before and after only
    "sokoban": Setup("sokoban", "agentgym/Sokoban-v0", {"max_steps_generation": 10},
                     max_turns=8, max_tokens=24, expert_episodes=100, sft_lr=1e-4,
                     sft_epochs=3, sft_batch=8, eval_temperature=1.0, eval_every=8,
                     random_episodes=200, final_draws=4, moves=4),
    # a short warm start: a policy that ignores the board ("down, right" repeated) wins 26%
    # of tuning seeds, so the format and the mix of moves put a model in the band, and what
    # RL can add is reading the board; greedy play of that model repeats one move (0%), so
    # success is measured sampled at T=1, the policy RL trains; held-out evaluation before
    # and after only, to fit the time
    "frozenlake": Setup("frozenlake", "textarena/FrozenLake-v0", {}, max_turns=10,
                        max_tokens=8, expert_episodes=30, sft_batch=8, eval_temperature=1.0,
                        eval_every=8, final_draws=4, moves=4),
    # G-RA against direct accumulation: oracle episodes (``git apply`` the fix, ``submit``) on
    # the 18 training repositories, held-out resolve on the 6 test ones (every test task);
    # an action holds up to 448 tokens, as the longest demonstrated patch call is 409
    "swe": Setup("swe", "agentgym/SWE-v0",
                 {"split": "train", "sandbox": "docker", "command_timeout": 20,
                  "test_timeout": 120}, max_turns=6, max_tokens=448, expert_episodes=18,
                 sft_epochs=3, sft_batch=4, steps=4, history_length=3, eval_seeds=6,
                 estimators=("grpo",), accumulations=("direct", "gated"), band=None,
                 eval_kwargs={"split": "test"},
                 rollout_options={"max_prompt_tokens": 3072, "step_timeout": 900},
                 optim_options={"mini_batches": 2, "max_tokens_per_micro_batch": 8192}),
}
# the second SWE arm (its ``about`` says why): RL trains on the 18 tasks demonstrated, so the
# warm start is fit to them (Sokoban's lr, ten epochs) until sampling reproduces their fixes;
# nothing in it was tuned on the held-out tasks
SETUPS["swe_editor"] = replace(
    SETUPS["swe"], name="swe_editor", kwargs={**SETUPS["swe"].kwargs, "expert": "editor"},
    sft_epochs=10, sft_lr=1e-4, label="editor demonstrations",
    about="The same comparison from a second warm start: the oracle demonstrated as `editor` "
          "calls (`expert=editor`: one `str_replace` per hunk, 57-251 tokens where the "
          "`git apply` calls take 178-398, with no diff headers whose line counts must be "
          "exact), fit to the 18 training tasks that RL trains on (10 epochs at lr 1e-4). The "
          "first warm start changed a file in 1 of its 192 training rollouts, so its runs could "
          "not show what the accumulations do once patches are made; the RL budget is the "
          "same.")

# Sokoban's arm at four times the steps; its ``about`` says why it has a warm start of its own
SETUPS["sokoban_4x"] = replace(
    SETUPS["sokoban"], steps=4 * SETUPS["sokoban"].steps, estimators=("grpo", "gigpo"),
    label="4x the steps", arm="4x",
    about="The Sokoban comparison again at four times the RL steps (32 where the section "
          "above has 8), GRPO against GiGPO only, with the same demonstrations, SFT recipe, "
          "tasks per step, groups, learning rate and seeds; the held-out evaluation every 8 "
          "steps puts the 8-step budget on the same curves. Its warm start is that recipe "
          "trained again, on the machine that ran the arm: the section above's, made again on "
          "it, came out with another loss curve (1.90 against 2.07 nats a completion over "
          "the first 32 steps, 0.73 against 1.00 over the last) and 38% "
          "greedy tuning-seed success against 21% (its batches are others: SFT now shuffles "
          "whole episodes and keeps their steps together, where it shuffled steps), so it is "
          "not the table above's warm start, and the arm measures its own. It was run once a "
          "step cost less than half of what it did when the study began (docs/benchmarks.md, "
          "the Sokoban step split): 31-50 s of training a step on an Intel Xeon with AMX "
          "against 114 s for the table above's GRPO seed 0 on an AMD EPYC.")

# warm starts the study moved away from, per env: their SFT key and what set them apart;
# their records stay, and the page lists them
SUPERSEDED = {"sokoban": {
    "sft-9bbc6798": "1 epoch, batch 16, lr 5e-5, left for being below the band",
    "sft-f3f31f68": "1 epoch, batch 16, lr 1e-4, left for being below the band"},
    "swe": {"sft-644d900b": "128 tokens per action where every demonstrated patch call needs "
                            "189-409: its model was cut off mid-call, 96-100% of its RL steps "
                            "invalid; `agentgym sft` now refuses such a setup"}}


def scaled(setup: Setup) -> Setup:
    """The ``--scale`` budget for a GPU machine: larger groups, more tasks and steps.

    Weights stay float32: a 135M model fits many times over, and bfloat16 weights (8
    mantissa bits) would round away most of an lr-1e-5 update. Checkpoints are sparser,
    since a GPU step takes a fraction of a second and a save about one.
    """
    return replace(setup, steps=setup.steps * 4, tasks_per_step=setup.tasks_per_step * 4,
                   group_size=8, eval_seeds=128, expert_episodes=setup.expert_episodes * 4,
                   device="cuda", sft_save_every=50)
