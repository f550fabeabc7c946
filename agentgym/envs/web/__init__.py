"""A local web shop for agents: a browser mode (Playwright + Chromium) and a text mode.

Registered as ``agentgym/WebShop-v0`` (browser, needs the ``web`` extra and Chromium) and
``agentgym/WebShopText-v0`` (plain HTTP, no browser). Both serve WebShop-style tasks over the
same generated catalogue and score a purchase the same way; see ``docs/web-envs.md``.
Importing this package imports neither Playwright nor bm25s.
"""

from .base import WebEnvError
from .browser_env import WebShopEnv
from .catalog import Catalog, Product, generate_catalog
from .tasks import Task, item_reward, make_task, order_reward
from .text_env import WebShopTextEnv

__all__ = ["Catalog", "Product", "Task", "WebEnvError", "WebShopEnv", "WebShopTextEnv",
           "generate_catalog", "item_reward", "make_task", "order_reward"]
