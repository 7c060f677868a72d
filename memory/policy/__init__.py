"""The lesson policy: what is kept, merged, recalled and retired (`store.ExperienceStore`, the API
the nodes call), over any storage backend (memory/storage/).
"""
