# rcu_cell counts the value it retires only after it has unpublished it.
set(header hotpath/rcu_cell.hpp)
set(old_1 [==[    dom_.charge(charged);
    T* old;
    {
      uncharge_unless_published settle{dom_, charged};
      std::scoped_lock l(writer_);
      old = publish(p.release());]==])
set(new_1 [==[    T* old;
    {
      uncharge_unless_published settle{dom_, charged};
      std::scoped_lock l(writer_);
      old = publish(p.release());
      dom_.charge(charged);]==])
