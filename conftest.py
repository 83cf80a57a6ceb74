"""Set-up for every test: the host name of the in-process test clients.

``tests/conftest.py`` builds its clients on ``http://gw``. In open mode the gateway answers
loopback host names only (``gateway/http/browser.py``), so the tests allow theirs the way
an operator would, with ``GATEWAY_ALLOWED_HOSTS``. Test processes (``tests/processes.py``)
start without it and are reached on 127.0.0.1.
"""

import os

os.environ.setdefault("GATEWAY_ALLOWED_HOSTS", "gw")
