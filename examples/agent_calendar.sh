#!/usr/bin/env bash
# The main job: SmolLM2-135M-Instruct learns to answer questions about a week of meetings by
# calling a calendar's tools (agentgym/Calendar-v0). The same three commands as the header of
# examples/agent_calendar.yaml, one after the other; docs/agent-job.md has the measured runs.
set -euo pipefail
cd "$(dirname "$0")/.."
agentgym rollout agentgym/Calendar-v0 --policy expert --episodes 64 --seed 100000 --kw split=train --out runs/agent_calendar_expert.jsonl
agentgym sft examples/sft_agent_calendar.yaml
agentgym train examples/agent_calendar.yaml
