"""The run model: phases, the total-time forecast and the signature, fed step ends, marks
and exchanged batches the same way live (the Lens) and in replay (a trace, a timeline)."""
