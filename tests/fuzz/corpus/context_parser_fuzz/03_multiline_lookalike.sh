A='l1
B=l2'
