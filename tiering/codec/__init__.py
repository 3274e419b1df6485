"""Pure codecs for every on-disk and on-wire structure: no asyncio, no aiohttp, no boto, no Spark.

The broker, the Python client and Spark executors share these modules.
"""
