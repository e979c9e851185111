"""miniBUDE: protein-ligand docking energies and their gradients on pad (``python -m apps.minibude``)."""
