"""The BabyAI levels shipped as envs, and the minigrid ids they run.

The list covers the levels of the BabyAI paper (Chevalier-Boisvert et al. 2019) by family:
GoTo, Pickup, Open, PutNext, Unlock and the Synth family (Synth, SynthLoc, SynthSeq, Boss).
``BabyAI-PutNextS7N4-v0`` stands in for the paper's PutNext (minigrid registers that level
under its size and object count).
"""

from __future__ import annotations

LEVELS: dict[str, str] = {
    # GoTo family
    "GoToObj": "BabyAI-GoToObj-v0",
    "GoToRedBallGrey": "BabyAI-GoToRedBallGrey-v0",
    "GoToRedBall": "BabyAI-GoToRedBall-v0",
    "GoToLocal": "BabyAI-GoToLocal-v0",
    "GoToObjMaze": "BabyAI-GoToObjMaze-v0",
    "GoTo": "BabyAI-GoTo-v0",
    "GoToSeq": "BabyAI-GoToSeq-v0",
    # Pickup family
    "PickupLoc": "BabyAI-PickupLoc-v0",
    "Pickup": "BabyAI-Pickup-v0",
    "UnblockPickup": "BabyAI-UnblockPickup-v0",
    # Open family
    "OpenDoor": "BabyAI-OpenDoor-v0",
    "Open": "BabyAI-Open-v0",
    # PutNext family
    "PutNextLocal": "BabyAI-PutNextLocal-v0",
    "PutNext": "BabyAI-PutNextS7N4-v0",
    # Unlock family
    "UnlockLocal": "BabyAI-UnlockLocal-v0",
    "Unlock": "BabyAI-Unlock-v0",
    # Synth family
    "Synth": "BabyAI-Synth-v0",
    "SynthLoc": "BabyAI-SynthLoc-v0",
    "SynthSeq": "BabyAI-SynthSeq-v0",
    "BossLevel": "BabyAI-BossLevel-v0",
}
"""Our level name -> the minigrid (Gymnasium) id of the level."""
