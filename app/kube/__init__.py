"""Kubernetes plumbing shared by the job kinds and the controllers.

The API client, informers, work queues, Events and leader election; imports only the
floors below it (config, wire, core).
"""
