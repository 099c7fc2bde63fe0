"""The bridge between torch.fx and optimus_eq's e-graphs: translation, lowering, torch.compile hooks."""
