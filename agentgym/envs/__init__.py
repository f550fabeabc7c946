"""Built-in environment families, registered under the ``agentgym/`` namespace.

Registration names entry points as strings, so importing this package imports no env code.
"""

from agentgym.registry import register
from agentgym.reward_presets import register_reward_preset

register(
    "agentgym/Sokoban-v0",
    "agentgym.envs.sokoban:SokobanEnv",
    description="Push every box onto a target in a procedurally generated grid (text).",
    max_turns=40,
)
register(
    "agentgym/Arithmetic-v0",
    "agentgym.envs.arithmetic:ArithmeticEnv",
    description="Multi-step word problems solved with a calculator tool; exact-answer reward.",
    max_turns=10,
)
register(
    "agentgym/MentalMath-v0",
    "agentgym.envs.arithmetic.mental:MentalMathEnv",
    description="Answer a small sum in plain text; a second try after a miss (no tools).",
    max_turns=2,
)
register(
    "agentgym/SWE-v0",
    "agentgym.envs.swe:SWEEnv",
    description="Fix a bug in a small Python repository (bash, editor, submit); tests judge it.",
    max_turns=30,
)
register(
    "agentgym/CodeMath-v0",
    "agentgym.envs.code:CodeMathEnv",
    description="Number problems solved by running Python in a sandboxed interpreter.",
    max_turns=8,
)
register(
    "agentgym/MultiHopSearch-v0",
    "agentgym.envs.retrieval:MultiHopSearchEnv",
    description="Multi-hop questions over a generated encyclopedia with BM25 search/open tools.",
    max_turns=10,
    requires=("extra:tools",),
)
register(
    "agentgym/MCPInventory-v0",
    "agentgym.envs.mcp:InventoryEnv",
    description="Inventory questions answered with the tools of a real MCP server (stdio).",
    max_turns=10,
    requires=("extra:tools",),
)
register(
    "agentgym/Calendar-v0",
    "agentgym.envs.calendar:CalendarEnv",
    description="Questions about a week of meetings, answered with list_events/get_event.",
    max_turns=6,
)
register(
    "agentgym/FunctionCalls-v0",
    "agentgym.envs.function_calls:FunctionCallsEnv",
    description="Generated function-calling tasks (BFCL's non-live AST kinds), BFCL's checker.",
    requires=("extra:bfcl",),
)
register(
    "agentgym/WebShop-v0",
    "agentgym.envs.web:WebShopEnv",
    description="Buy the product a task describes on a local shop site, in real Chromium.",
    max_turns=20,
    requires=("browser", "extra:web"),
)
register(
    "agentgym/WebShopText-v0",
    "agentgym.envs.web:WebShopTextEnv",
    description="The WebShop-v0 shop as text pages over HTTP (no browser); same tasks/rewards.",
    max_turns=20,
    requires=("extra:web",),
)
register(
    "agentgym/LogSearch-v0",
    "agentgym.envs.logsearch:LogSearchEnv",
    description="Trace a failed request through long server logs (read/grep); long contexts.",
    max_turns=80,
)

# BabyAI levels (minigrid), TextArena single-player games and Reasoning Gym datasets. The
# names are listed here, not imported from the families, so that importing this package
# imports no env code; agentgym/envs/babyai/levels.py, agentgym/envs/textarena/games.py and
# agentgym/envs/reasoning_gym/__init__.py hold the same lists (a test keeps them equal).
for _level in ("GoToObj", "GoToRedBallGrey", "GoToRedBall", "GoToLocal", "GoToObjMaze", "GoTo",
               "GoToSeq", "PickupLoc", "Pickup", "UnblockPickup", "OpenDoor", "Open",
               "PutNextLocal", "PutNext", "UnlockLocal", "Unlock", "Synth", "SynthLoc",
               "SynthSeq", "BossLevel"):
    register(f"babyai/{_level}-v0", "agentgym.envs.babyai:BabyAIEnv", level=_level,
             description=f"BabyAI {_level} (minigrid) as text: mission, view in words, 6 actions.",
             requires=("extra:games",))
for _game in ("FrozenLake", "Minesweeper", "Sudoku", "TowerOfHanoi", "GuessTheNumber",
              "Crosswords", "Mastermind", "Sokoban", "2048", "LightsOut", "FifteenPuzzle"):
    register(f"textarena/{_game}-v0", "agentgym.envs.textarena:TextArenaEnv", game=_game,
             description=f"TextArena's single-player {_game}, scored by TextArena.",
             requires=("extra:games",))
for _name, _dataset in (("ChainSum", "chain_sum"), ("BasicArithmetic", "basic_arithmetic"),
                        ("LegCounting", "leg_counting"), ("LetterCounting", "letter_counting"),
                        ("SpellBackward", "spell_backward"), ("WordSorting", "word_sorting"),
                        ("GSMSymbolic", "gsm_symbolic"), ("SimpleEquations", "simple_equations"),
                        ("BaseConversion", "base_conversion"),
                        ("FamilyRelationships", "family_relationships"), ("Maze", "maze"),
                        ("MiniSudoku", "mini_sudoku"), ("KnightsKnaves", "knights_knaves"),
                        ("Countdown", "countdown")):
    register(f"reasoning-gym/{_name}-v0", "agentgym.envs.reasoning_gym:ReasoningGymEnv",
             dataset=_dataset, description=f"Reasoning Gym {_dataset}, scored by its verifier.",
             requires=("extra:games",))
register("reasoning-gym/Dataset-v0", "agentgym.envs.reasoning_gym:ReasoningGymEnv",
         description="Any Reasoning Gym dataset (dataset=NAME, attempts=N for retries).",
         requires=("extra:games",))
register("bfcl/SingleTurn-v0", "agentgym.envs.bfcl:BFCLSingleTurnEnv",
         description="BFCL single-turn function calling (category=...), BFCL's AST checker.",
         requires=("extra:bfcl",))
register("bfcl/MultiTurn-v0", "agentgym.envs.bfcl:BFCLMultiTurnEnv",
         description="BFCL multi-turn function calling on BFCL's API classes and checkers.",
         max_observation_chars=None,  # BFCL shows results whole (long_context tests that)
         requires=("extra:bfcl",))
# ScienceWorld and TWX end episodes at their own step limit (step_limit=100, the packages'
# envStepLimit); the turn limit is a guard against free actions at twice that (SwiftSage's).
register("scienceworld/ScienceWorld-v0", "agentgym.envs.scienceworld:ScienceWorldEnv",
         description="ScienceWorld's 30 science task types (task=..., split=...), scored by it.",
         max_turns=200, requires=("java", "extra:scienceworld"))
for _game, _name in (("coin", "CoinCollector"), ("cookingworld", "CookingWorld"),
                     ("twc", "TWC"), ("mapreader", "MapReader"), ("arithmetic", "Arithmetic"),
                     ("sorting", "Sorting"), ("simonsays", "SimonSays"),
                     ("peckingorder", "PeckingOrder")):
    register(f"twx/{_name}-v0", "agentgym.envs.textworld_express:TextWorldExpressEnv",
             game=_game, description=f"TextWorldExpress {_game} (game_params=..., split=...).",
             max_turns=200, requires=("java", "extra:textworld-express"))
register("miniwob/MiniWoB-v0", "agentgym.envs.miniwob:MiniWoBEnv",
         description="MiniWoB++ web tasks (task=..., 130 of them) on the miniwob package's own "
                     "pages and rewards, in real Chromium.",
         max_turns=60, requires=("browser", "extra:miniwob"))
# One id per task of miniwob 1.1.0 (the pinned version), named here so that registering
# imports nothing; agentgym/envs/miniwob/tasks.py reads the same list from the installed package (a
# test keeps them equal).
MINIWOB_TASKS = (
    "ascending-numbers", "bisect-angle", "book-flight", "book-flight-nodelay", "button-delay",
    "buy-ticket", "chase-circle", "choose-date", "choose-date-easy", "choose-date-medium",
    "choose-date-nodelay", "choose-list", "circle-center", "click-button",
    "click-button-sequence", "click-checkboxes", "click-checkboxes-large",
    "click-checkboxes-soft", "click-checkboxes-transfer", "click-collapsible",
    "click-collapsible-2", "click-collapsible-2-nodelay", "click-collapsible-nodelay",
    "click-color", "click-dialog", "click-dialog-2", "click-link", "click-menu", "click-menu-2",
    "click-option", "click-pie", "click-pie-nodelay", "click-scroll-list", "click-shades",
    "click-shape", "click-tab", "click-tab-2", "click-tab-2-easy", "click-tab-2-hard",
    "click-tab-2-medium", "click-test", "click-test-2", "click-test-transfer", "click-widget",
    "copy-paste", "copy-paste-2", "count-shape", "count-sides", "daily-calendar", "drag-box",
    "drag-circle", "drag-cube", "drag-items", "drag-items-grid", "drag-shapes", "drag-shapes-2",
    "drag-single-shape", "drag-sort-numbers", "draw-circle", "draw-line", "email-inbox",
    "email-inbox-delete", "email-inbox-forward", "email-inbox-forward-nl",
    "email-inbox-forward-nl-turk", "email-inbox-important", "email-inbox-nl-turk",
    "email-inbox-noscroll", "email-inbox-reply", "email-inbox-star-reply", "enter-date",
    "enter-password", "enter-text", "enter-text-2", "enter-text-dynamic", "enter-time",
    "find-greatest", "find-midpoint", "find-word", "focus-text", "focus-text-2", "form-sequence",
    "form-sequence-2", "form-sequence-3", "generate-number", "grid-coordinate", "guess-number",
    "highlight-text", "highlight-text-2", "hot-cold", "hover-shape", "identify-shape",
    "login-user", "login-user-popup", "moving-items", "multi-layouts", "multi-orderings",
    "navigate-tree", "number-checkboxes", "odd-or-even", "order-food", "phone-book", "read-table",
    "read-table-2", "resize-textarea", "right-angle", "scroll-text", "scroll-text-2",
    "search-engine", "sign-agreement", "simon-says", "simple-algebra", "simple-arithmetic",
    "social-media", "social-media-all", "social-media-some", "stock-market", "terminal",
    "text-editor", "text-transform", "tic-tac-toe", "unicode-test", "use-autocomplete",
    "use-autocomplete-nodelay", "use-colorwheel", "use-colorwheel-2", "use-slider",
    "use-slider-2", "use-spinner", "visual-addition",
)
for _task in MINIWOB_TASKS:
    register(f"miniwob/{_task}-v0", "agentgym.envs.miniwob:MiniWoBEnv", task=_task,
             alias_of="miniwob/MiniWoB-v0", max_turns=60, requires=("browser", "extra:miniwob"),
             description=f"MiniWoB++ {_task} (miniwob/MiniWoB-v0 with task={_task}).")

# G-RA's components for SWE episodes (algorithm.reward_preset: swe), imported on use.
register_reward_preset("swe", "agentgym.envs.swe.rewards:PRESET")
