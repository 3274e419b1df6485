"""The client commands of the ``tierlog`` CLI: ``topics``, ``produce``, ``consume``, ``groups``."""
