"""The management API as a library: configuration store and activation, audit, auth,
startup status, inventory. `app.management.api.install(app, Management(...))`
mounts its routes; everything exported here is free of HTTP and of Ray."""

from app.management.activation import ActivationFailed, Activator, InProcessActivator, NoopActivator
from app.management.audit import AuditLog
from app.management.auth import Authenticator, Principal
from app.management.service import Management, RoutingPreviewer
from app.management.startup import StartupTracker
from app.management.state import ConfigStore

__all__ = [
    "ActivationFailed",
    "Activator",
    "AuditLog",
    "Authenticator",
    "ConfigStore",
    "InProcessActivator",
    "Management",
    "NoopActivator",
    "Principal",
    "RoutingPreviewer",
    "StartupTracker",
]
