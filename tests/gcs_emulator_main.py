"""``python gcs_emulator_main.py PORT``: gcp-storage-emulator on 127.0.0.1:PORT, in memory, until SIGTERM.

One gap of the emulator is closed first. In Google Cloud Storage, ``objects.rewrite`` takes an object
resource as its body, and a ``storageClass`` there becomes the class of the written object: it is how
an object's class is changed in place (``gcloud storage objects update --storage-class`` does it so).
The emulator ignores the body and copies the source's class. Its rewrite handler is wrapped here to
apply the body's ``storageClass`` to the object it wrote, so an archive can be checked end to end.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from gcp_storage_emulator import server
from gcp_storage_emulator.handlers import objects

_original_rewrite = objects.rewrite


def _rewrite_with_destination_class(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> None:
    _original_rewrite(request, response, storage, *args, **kwargs)
    body = request.data if isinstance(request.data, dict) else {}
    storage_class = body.get("storageClass")
    if storage_class and response.status < 300:
        bucket, name = request.params["dest_bucket_name"], request.params["dest_object_id"]
        written = storage.get_file_obj(bucket, name)
        storage.patch_object(bucket, name, {**written, "storageClass": storage_class})
        response.json(
            {
                "kind": "storage#rewriteResponse",
                "totalBytesRewritten": str(written["size"]),
                "objectSize": str(written["size"]),
                "done": True,
                "resource": storage.get_file_obj(bucket, name),
            }
        )


def main() -> None:
    for _pattern, handlers in server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler is _original_rewrite:
                handlers[method] = _rewrite_with_destination_class
    server.create_server("127.0.0.1", int(sys.argv[1]), in_memory=True).start()
    signal.pause()  # SIGTERM's default action ends the process: the objects lived in memory only


if __name__ == "__main__":
    main()
