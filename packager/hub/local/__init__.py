"""The local Hub-compatible server (aiohttp): rules, store, endpoints. The client side lives in packager.hub."""
