A='x'
