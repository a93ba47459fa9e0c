A='$(id) `id` $HOME'
